//! Durable state in redb: jobs (with spec, state and current run), accepted reports,
//! events, allocations per round and counters. Every change is one [`Changes`]
//! committed in one write transaction (fsync'd) before the API answers.

use crate::error::{db, ServeError};
use crate::job::JobRecord;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;

const JOBS: TableDefinition<&str, &str> = TableDefinition::new("jobs");
const REPORTS: TableDefinition<(&str, u64), &str> = TableDefinition::new("reports");
const EVENTS: TableDefinition<(&str, u64), &str> = TableDefinition::new("events");
const ROUNDS: TableDefinition<u64, &str> = TableDefinition::new("rounds");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Counter names in the `meta` table.
pub const NEXT_JOB: &str = "next_job";
pub const NEXT_EVENT: &str = "next_event";
pub const ROUND: &str = "round";
pub const RESTARTS: &str = "restarts";
pub const EPOCH_MS: &str = "epoch_ms";

/// The state database.
pub struct Store {
    db: Database,
}

/// Writes that are committed together or not at all.
#[derive(Debug, Default)]
pub struct Changes {
    jobs: Vec<(String, String)>,
    reports: Vec<(String, u64, String)>,
    events: Vec<(String, u64, String)>,
    rounds: Vec<(u64, String)>,
    meta: Vec<(&'static str, u64)>,
}

impl Changes {
    pub fn job(&mut self, j: &JobRecord) {
        let json = serde_json::to_string(j).expect("a job record always serialises");
        self.jobs.push((j.id.clone(), json));
    }
    pub fn report(&mut self, job: &str, n: u64, json: String) {
        self.reports.push((job.to_string(), n, json));
    }
    pub fn event(&mut self, job: &str, seq: u64, json: String) {
        self.events.push((job.to_string(), seq, json));
    }
    pub fn round(&mut self, n: u64, json: String) {
        self.rounds.push((n, json));
    }
    pub fn meta(&mut self, key: &'static str, v: u64) {
        self.meta.push((key, v));
    }
    /// Appends `other` (its writes win where both write the same key).
    pub fn extend(&mut self, other: Changes) {
        self.jobs.extend(other.jobs);
        self.reports.extend(other.reports);
        self.events.extend(other.events);
        self.rounds.extend(other.rounds);
        self.meta.extend(other.meta);
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.reports.is_empty()
            && self.events.is_empty()
            && self.rounds.is_empty()
            && self.meta.is_empty()
    }
}

impl Store {
    /// Opens (or creates) the database at `path` and its tables, after checking every
    /// page's checksum. A file that cannot be opened or is damaged (truncated,
    /// bit-flipped) is a [`ServeError::Corrupt`] naming it and how to start again, also
    /// when redb panics on it (caught here, at the boundary).
    pub fn open(path: &Path) -> Result<Store, ServeError> {
        let existed = path.exists();
        // The default hook would print the panic as if the service had crashed.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let opened = std::panic::catch_unwind(|| Self::open_checked(path));
        std::panic::set_hook(hook);
        let detail = match opened {
            Ok(Ok((store, clean))) => {
                if !clean {
                    eprintln!(
                        "pacer serve: {}: failed its integrity check and was repaired by redb; changes of the last transactions may be lost",
                        path.display()
                    );
                }
                return Ok(store);
            }
            Ok(Err(e)) if !existed => return Err(e),
            Ok(Err(e)) => e.to_string(),
            Err(panic) => format!(
                "redb gave up reading it: {}",
                panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)")
            ),
        };
        Err(ServeError::Corrupt {
            path: path.to_path_buf(),
            detail,
        })
    }

    fn open_checked(path: &Path) -> Result<(Store, bool), ServeError> {
        let mut database = Database::create(path).map_err(db)?;
        let clean = database.check_integrity().map_err(db)?;
        let w = database.begin_write().map_err(db)?;
        {
            w.open_table(JOBS).map_err(db)?;
            w.open_table(REPORTS).map_err(db)?;
            w.open_table(EVENTS).map_err(db)?;
            w.open_table(ROUNDS).map_err(db)?;
            w.open_table(META).map_err(db)?;
        }
        w.commit().map_err(db)?;
        Ok((Store { db: database }, clean))
    }

    /// Commits `c` durably (one transaction).
    pub fn commit(&self, c: Changes) -> Result<(), ServeError> {
        if c.is_empty() {
            return Ok(());
        }
        let w = self.db.begin_write().map_err(db)?;
        {
            let mut t = w.open_table(JOBS).map_err(db)?;
            for (k, v) in &c.jobs {
                t.insert(k.as_str(), v.as_str()).map_err(db)?;
            }
            let mut t = w.open_table(REPORTS).map_err(db)?;
            for (k, n, v) in &c.reports {
                t.insert((k.as_str(), *n), v.as_str()).map_err(db)?;
            }
            let mut t = w.open_table(EVENTS).map_err(db)?;
            for (k, n, v) in &c.events {
                t.insert((k.as_str(), *n), v.as_str()).map_err(db)?;
            }
            let mut t = w.open_table(ROUNDS).map_err(db)?;
            for (n, v) in &c.rounds {
                t.insert(*n, v.as_str()).map_err(db)?;
            }
            let mut t = w.open_table(META).map_err(db)?;
            for (k, v) in &c.meta {
                t.insert(*k, *v).map_err(db)?;
            }
        }
        w.commit().map_err(db)?;
        Ok(())
    }

    /// Every job record.
    pub fn load_jobs(&self) -> Result<Vec<JobRecord>, ServeError> {
        let r = self.db.begin_read().map_err(db)?;
        let t = r.open_table(JOBS).map_err(db)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(db)? {
            let (k, v) = row.map_err(db)?;
            let j: JobRecord =
                serde_json::from_str(v.value()).map_err(|source| ServeError::Record {
                    key: format!("jobs/{}", k.value()),
                    source,
                })?;
            out.push(j);
        }
        Ok(out)
    }

    /// A counter (0 when never set).
    pub fn meta(&self, key: &str) -> Result<u64, ServeError> {
        let r = self.db.begin_read().map_err(db)?;
        let t = r.open_table(META).map_err(db)?;
        Ok(t.get(key).map_err(db)?.map_or(0, |v| v.value()))
    }

    /// Up to `limit` reports of `job` from index `from`, as stored JSON.
    pub fn reports(
        &self,
        job: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, String)>, ServeError> {
        range(&self.db, REPORTS, job, from, limit)
    }

    /// Up to `limit` events of `job` (`""`: the service's own) from sequence `from`.
    pub fn events(
        &self,
        job: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, String)>, ServeError> {
        range(&self.db, EVENTS, job, from, limit)
    }

    /// Rounds from `from`, at most `limit`.
    pub fn rounds(&self, from: u64, limit: usize) -> Result<Vec<(u64, String)>, ServeError> {
        let r = self.db.begin_read().map_err(db)?;
        let t = r.open_table(ROUNDS).map_err(db)?;
        let mut out = Vec::new();
        for row in t.range(from..).map_err(db)?.take(limit) {
            let (k, v) = row.map_err(db)?;
            out.push((k.value(), v.value().to_string()));
        }
        Ok(out)
    }
}

fn range(
    db_: &Database,
    table: TableDefinition<(&str, u64), &str>,
    job: &str,
    from: u64,
    limit: usize,
) -> Result<Vec<(u64, String)>, ServeError> {
    let r = db_.begin_read().map_err(db)?;
    let t = r.open_table(table).map_err(db)?;
    let mut out = Vec::new();
    for row in t
        .range((job, from)..=(job, u64::MAX))
        .map_err(db)?
        .take(limit)
    {
        let (k, v) = row.map_err(db)?;
        out.push((k.value().1, v.value().to_string()));
    }
    Ok(out)
}
