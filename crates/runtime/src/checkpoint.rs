//! Checkpoints of a training job (`--checkpoint-dir`), for running under a scheduler
//! service that preempts and resizes jobs by SIGTERM and restart.
//!
//! A checkpoint is written when the controller stops on a signal (SIGTERM or SIGINT,
//! [`crate::interrupt`]) at an iteration boundary: the iteration in flight is
//! abandoned, the deferred optimiser step of the last completed one applied, so the
//! checkpoint is the state after `step` optimiser steps. It holds the parameters, the
//! optimiser's state (step count, momentum / Adam moments), the step and the sample
//! position. The sample stream is a pure function of the seed and the position
//! ([`crate::data::SampleStream`]: a seeded permutation per epoch), so the position
//! *is* the data loader's and its RNG's state: a resumed run reads exactly the samples
//! the uninterrupted run would have, with any number of workers. Not saved: the job
//! session's speed predictors and controller state (they learn the — possibly new —
//! workers again within a few iterations), the gradient-noise-scale estimate and the
//! report's curves, which start again.
//!
//! File `pacer-checkpoint.bin` in the directory, written whole or not at all (a
//! temporary file in the same directory, synced, then renamed over the old one):
//! ```text
//! magic "PACRCKPT" | u32 format | u32 n | n bytes of JSON (CheckpointMeta)
//! | params: u64 count + count × f32 | optimiser t: u32
//! | m: u64 count + count × f32 | v: u64 count + count × f32
//! | u64 FNV-1a of everything before it
//! ```
//! all little-endian. On start, a checkpoint made for another dataset, model or
//! optimiser, or with another seed, is an error naming the field that differs.

use crate::controller::ControllerConfig;
use crate::data::Data;
use crate::error::RuntimeError;
use crate::model::{ModelSpec, MAX_PARAMS};
use crate::optim::{OptimSpec, Optimizer};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file in the checkpoint directory.
pub const FILE: &str = "pacer-checkpoint.bin";
const MAGIC: &[u8; 8] = b"PACRCKPT";
/// Version of the file layout; another is refused.
pub const FORMAT: u32 = 1;
/// Largest metadata section accepted (it is a few hundred bytes).
const MAX_META: u32 = 1 << 20;

/// What the run was (checked on resume) and where it stood.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointMeta {
    pub dataset: String,
    pub fingerprint: u64,
    pub n_train: u64,
    pub model: String,
    pub dim: u32,
    pub classes: u32,
    pub width: u32,
    pub optimizer: OptimSpec,
    pub seed: u64,
    /// The global batch of the run that wrote it (a resumed run may use another).
    pub global_batch: u64,
    /// Optimiser steps (iterations) done, across every run before.
    pub step: u64,
    /// Samples of the stream consumed, across every run before: where the next
    /// iteration starts.
    pub samples: u64,
}

/// A training job's state at an iteration boundary.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub meta: CheckpointMeta,
    pub params: Vec<f32>,
    pub optimizer: Optimizer,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn put_f32s(out: &mut Vec<u8>, v: &[f32]) {
    out.extend_from_slice(&(v.len() as u64).to_le_bytes());
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// Reads a checkpoint's fields in order; every failure names the file and the field.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl Cursor<'_> {
    fn err(&self, field: &str, message: impl std::fmt::Display) -> RuntimeError {
        RuntimeError::config(
            "checkpoint_dir",
            format!(
                "{}: {field} at byte {}: {message}",
                self.path.display(),
                self.pos
            ),
        )
    }
    fn take(&mut self, n: usize, field: &str) -> Result<&[u8], RuntimeError> {
        if self.buf.len() - self.pos < n {
            return Err(self.err(
                field,
                format!("the file ends after {} bytes (truncated?)", self.buf.len()),
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u32(&mut self, field: &str) -> Result<u32, RuntimeError> {
        Ok(u32::from_le_bytes(
            self.take(4, field)?.try_into().expect("4"),
        ))
    }
    fn u64(&mut self, field: &str) -> Result<u64, RuntimeError> {
        Ok(u64::from_le_bytes(
            self.take(8, field)?.try_into().expect("8"),
        ))
    }
    /// An `f32` vector of exactly `expect` values (checked before reading them).
    fn f32s(&mut self, field: &str, expect: usize) -> Result<Vec<f32>, RuntimeError> {
        let n = self.u64(field)?;
        if n != expect as u64 {
            return Err(self.err(field, format!("{n} values, expected {expect}")));
        }
        let bytes = self.take(expect * 4, field)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4")))
            .collect())
    }
}

impl Checkpoint {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let meta = serde_json::to_vec(&self.meta).expect("plain data serialises");
        let (t, m, v) = self.optimizer.state();
        let mut out =
            Vec::with_capacity(64 + meta.len() + 4 * (self.params.len() + m.len() + v.len()));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT.to_le_bytes());
        out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        out.extend_from_slice(&meta);
        put_f32s(&mut out, &self.params);
        out.extend_from_slice(&t.to_le_bytes());
        put_f32s(&mut out, m);
        put_f32s(&mut out, v);
        let sum = fnv1a(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Parses the bytes of `path` (named in errors).
    pub fn decode(buf: &[u8], path: &Path) -> Result<Checkpoint, RuntimeError> {
        let mut c = Cursor { buf, pos: 0, path };
        if c.take(8, "magic")? != MAGIC {
            return Err(c.err("magic", "not a pacer checkpoint (expected \"PACRCKPT\")"));
        }
        let format = c.u32("format")?;
        if format != FORMAT {
            return Err(c.err(
                "format",
                format!("format {format}, this build reads format {FORMAT}"),
            ));
        }
        if buf.len() < 8
            || fnv1a(&buf[..buf.len() - 8])
                != u64::from_le_bytes(buf[buf.len() - 8..].try_into().expect("8"))
        {
            return Err(c.err(
                "checksum",
                "the checksum does not match (damaged or truncated file)",
            ));
        }
        let n = c.u32("metadata length")?;
        if n > MAX_META {
            return Err(c.err("metadata length", format!("{n} bytes, at most {MAX_META}")));
        }
        let meta: CheckpointMeta = serde_json::from_slice(c.take(n as usize, "metadata")?)
            .map_err(|e| c.err("metadata", e))?;
        let spec = ModelSpec::new(
            &meta.model,
            meta.dim as usize,
            meta.classes as usize,
            meta.width as usize,
        )
        .map_err(|e| c.err("metadata.model", e))?;
        let n_params = spec
            .n_params()
            .filter(|&n| n <= MAX_PARAMS)
            .expect("checked by ModelSpec::new") as usize;
        let params = c.f32s("params", n_params)?;
        let t = c.u32("optimiser step count")?;
        let n_v = match meta.optimizer {
            OptimSpec::Adam { .. } => n_params,
            OptimSpec::Sgd { .. } => 0,
        };
        let m = c.f32s("optimiser state m", n_params)?;
        let v = c.f32s("optimiser state v", n_v)?;
        c.take(8, "checksum")?;
        if c.pos != buf.len() {
            return Err(c.err(
                "(end)",
                format!("{} bytes after the checksum", buf.len() - c.pos),
            ));
        }
        // A checksum proves no damage, not honesty: whoever wrote the file could
        // recompute it. Numbers that would poison the run are refused by name.
        for (field, values, nonneg) in [
            ("params", &params, false),
            ("optimiser state m", &m, false),
            ("optimiser state v", &v, true),
        ] {
            if let Some(i) = values
                .iter()
                .position(|x| !x.is_finite() || (nonneg && *x < 0.0))
            {
                return Err(c.err(
                    field,
                    format!(
                        "value {i} of {} is {}; expected a finite number{} (a poisoned or \
                         diverged checkpoint; remove it to start afresh)",
                        values.len(),
                        values[i],
                        if nonneg { " ≥ 0" } else { "" }
                    ),
                ));
            }
        }
        let optimizer =
            Optimizer::restore(meta.optimizer, t, m, v).map_err(|e| c.err("optimiser state", e))?;
        Ok(Checkpoint {
            meta,
            params,
            optimizer,
        })
    }

    /// The checkpoint file of `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(FILE)
    }

    /// Writes it into `dir` atomically: a temporary file in `dir`, synced, renamed
    /// over [`FILE`]; the directory is created if missing.
    pub fn save(&self, dir: &Path) -> Result<PathBuf, RuntimeError> {
        use std::io::Write;
        let ctx = |what: &str| format!("`checkpoint_dir` {}: {what}", dir.display());
        std::fs::create_dir_all(dir).map_err(|e| RuntimeError::io(ctx("creating it"), e))?;
        let path = Checkpoint::path(dir);
        let tmp = dir.join(format!(".{FILE}.tmp-{}", std::process::id()));
        let bytes = self.encode();
        let written = (|| {
            // Created afresh (O_EXCL): never through a symlink planted at the
            // temporary name; a leftover of a crashed run with this pid goes first.
            let _ = std::fs::remove_file(&tmp);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            // The rename itself is durable once the directory is synced.
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
            Ok(())
        })();
        written.map_err(|e: std::io::Error| {
            let _ = std::fs::remove_file(&tmp);
            RuntimeError::io(ctx(&format!("writing {}", path.display())), e)
        })?;
        Ok(path)
    }

    /// The largest checkpoint file a model of `n_params` parameters can have: the
    /// magic, format and metadata (at most 1 MiB), three vectors of `n_params` values
    /// with their counts (parameters, Adam's two moments), the step count and the
    /// checksum. Reads stop there: a checkpoint is a file someone handed over, and
    /// one symlinked to `/dev/zero` once grew the trainer to 2 GB.
    pub fn max_file_bytes(n_params: usize) -> u64 {
        8 + 4 + 4 + u64::from(MAX_META) + 3 * (8 + 4 * n_params as u64) + 4 + 8
    }

    /// The checkpoint in `dir` for a run of `model`, `None` when there is none. The
    /// file must be a regular file (a device, a FIFO or a directory is refused
    /// without reading it) of at most [`Checkpoint::max_file_bytes`] for the model.
    pub fn load(dir: &Path, model: &ModelSpec) -> Result<Option<Checkpoint>, RuntimeError> {
        let path = Checkpoint::path(dir);
        let n_params = model.n_params().unwrap_or(MAX_PARAMS).min(MAX_PARAMS) as usize;
        let limit = Checkpoint::max_file_bytes(n_params);
        match read_bounded(&path, limit)? {
            None => Ok(None),
            Some(bytes) => Checkpoint::decode(&bytes, &path).map(Some),
        }
    }

    /// The state of a run of `cfg` on `data` that has done `step` iterations over
    /// `samples` samples.
    pub fn of_run(
        data: &Data,
        cfg: &ControllerConfig,
        step: u64,
        samples: u64,
        params: Vec<f32>,
        optimizer: Optimizer,
    ) -> Checkpoint {
        let (model, seed, global_batch) = (&cfg.model, cfg.seed, cfg.global_batch);
        Checkpoint {
            meta: CheckpointMeta {
                dataset: data.spec.clone(),
                fingerprint: data.fingerprint,
                n_train: data.train.n as u64,
                model: model.name().to_string(),
                dim: model.dim,
                classes: model.classes,
                width: model.width,
                optimizer: optimizer.spec(),
                seed,
                global_batch,
                step,
                samples,
            },
            params,
            optimizer,
        }
    }

    /// Whether this checkpoint can resume a run of `model` with `optimizer` and
    /// `seed` on `data`: an error naming the first field that differs.
    pub fn check_matches(
        &self,
        dir: &Path,
        data: &Data,
        model: &ModelSpec,
        optimizer: &OptimSpec,
        seed: u64,
    ) -> Result<(), RuntimeError> {
        let m = &self.meta;
        let mismatch = |field: &str, theirs: String, ours: String| {
            Err(RuntimeError::config(
                "checkpoint_dir",
                format!(
                    "{}: the checkpoint is of another run: its {field} is {theirs}, this run's is {ours}; \
                     use another directory, or remove the checkpoint to start afresh",
                    Checkpoint::path(dir).display()
                ),
            ))
        };
        if m.fingerprint != data.fingerprint || m.n_train != data.train.n as u64 {
            return mismatch(
                "dataset",
                format!(
                    "`{}` ({} training samples, fingerprint {:016x})",
                    m.dataset, m.n_train, m.fingerprint
                ),
                format!(
                    "`{}` ({} training samples, fingerprint {:016x})",
                    data.spec, data.train.n, data.fingerprint
                ),
            );
        }
        let shape = |name: &str, d: u32, c: u32, w: u32| {
            format!("{name} (dim {d}, classes {c}, width {w})")
        };
        if m.model != model.name()
            || m.dim != model.dim
            || m.classes != model.classes
            || m.width != model.width
        {
            return mismatch(
                "model",
                shape(&m.model, m.dim, m.classes, m.width),
                shape(model.name(), model.dim, model.classes, model.width),
            );
        }
        if m.optimizer != *optimizer {
            return mismatch(
                "optimiser",
                format!("{:?}", m.optimizer),
                format!("{optimizer:?}"),
            );
        }
        if m.seed != seed {
            return mismatch("seed", m.seed.to_string(), seed.to_string());
        }
        Ok(())
    }
}

/// The bytes of `path` if it is a regular file of at most `limit` bytes; `None` when
/// it does not exist. Opened without blocking (a FIFO would wait for a writer) and
/// checked on the opened descriptor, so the file read is the file checked; the read
/// itself stops one byte past `limit` whatever the file claims.
fn read_bounded(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, RuntimeError> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let ctx = |what: &str| format!("`checkpoint_dir`: {}: {what}", path.display());
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(RuntimeError::io(ctx("opening it"), e)),
    };
    let meta = file
        .metadata()
        .map_err(|e| RuntimeError::io(ctx("reading its metadata"), e))?;
    let t = meta.file_type();
    if !t.is_file() {
        let kind = if t.is_dir() {
            "a directory"
        } else if t.is_char_device() || t.is_block_device() {
            "a device"
        } else if t.is_fifo() {
            "a FIFO"
        } else if t.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Err(RuntimeError::config(
            "checkpoint_dir",
            format!(
                "{}: is {kind}; a checkpoint must be a regular file (remove it, or use \
                 another directory)",
                path.display()
            ),
        ));
    }
    let too_big = |size: u64| {
        RuntimeError::config(
            "checkpoint_dir",
            format!(
                "{}: {size} bytes or more, larger than the {limit} bytes a checkpoint of \
                 this model can be (parameters and optimiser state; a checkpoint of another, \
                 larger model?); not read",
                path.display()
            ),
        )
    };
    if meta.len() > limit {
        return Err(too_big(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| RuntimeError::io(ctx("reading it"), e))?;
    // It grew while we read it.
    if bytes.len() as u64 > limit {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `<fresh folder>/pacer-ckpt-<name>`, not created; the folder goes with the guard.
    fn scratch(name: &str) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().expect("a scratch folder");
        let d = tmp.path().join(format!("pacer-ckpt-{name}"));
        (tmp, d)
    }

    /// A checkpoint of a few optimiser steps of `spec` on the `tiny` data.
    fn sample(spec: OptimSpec) -> (Data, ModelSpec, Checkpoint) {
        let data = crate::data::load("tiny").unwrap();
        let model = ModelSpec::new("mlp", data.train.dim, data.train.classes, 8).unwrap();
        let m = model.build();
        let mut params = m.init(3, &data.train);
        let mut opt = Optimizer::new(spec, params.len());
        for k in 0..3 {
            let g: Vec<f32> = (0..params.len())
                .map(|i| ((i * 7 + k) % 11) as f32 * 0.01 - 0.05)
                .collect();
            opt.step(&mut params, &g);
        }
        let mut cfg = ControllerConfig::new(model).unwrap();
        cfg.seed = 3;
        cfg.global_batch = 64;
        let c = Checkpoint::of_run(&data, &cfg, 3, 192, params, opt);
        (data, model, c)
    }

    fn adam() -> OptimSpec {
        OptimSpec::Adam {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }

    #[test]
    fn a_checkpoint_round_trips_exactly_through_its_file() {
        let sgd = OptimSpec::Sgd {
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 1e-4,
        };
        for spec in [adam(), sgd] {
            let (_, model, c) = sample(spec);
            let (_tmp, dir) = scratch(&format!("{spec:?}").replace(' ', "")[..8]);
            let path = c.save(&dir).unwrap();
            let back = Checkpoint::load(&dir, &model).unwrap().unwrap();
            // Bit for bit: parameters, optimiser step count and moments, position.
            assert_eq!(back, c);
            assert_eq!(back.optimizer.state().0, 3);
            // Nothing but the checkpoint is left in the directory.
            let names: Vec<_> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, [std::ffi::OsString::from(FILE)], "{path:?}");
            std::fs::remove_dir_all(&dir).unwrap();
        }
        let (_, model, _) = sample(adam());
        assert!(Checkpoint::load(&scratch("none").1, &model)
            .unwrap()
            .is_none());
    }

    /// Issue 23: a checkpoint that is a device, a FIFO or a directory is refused
    /// without reading it (one symlinked to /dev/zero grew the trainer to 2 GB; a
    /// FIFO blocked the start forever), and a regular file larger than the model's
    /// checkpoint can be is refused with the limit in the error.
    #[test]
    fn checkpoint_reads_are_bounded_and_only_of_regular_files() {
        let (_, model, c) = sample(adam());
        let n_params = model.n_params().unwrap() as usize;
        let limit = Checkpoint::max_file_bytes(n_params);
        // A real checkpoint of the model fits.
        assert!(c.encode().len() as u64 <= limit);
        assert!(limit < 2 << 20, "{limit}: the MLP's limit is about 1 MiB");
        let (_tmp, dir) = scratch("bounded");
        std::fs::create_dir_all(&dir).unwrap();
        let path = Checkpoint::path(&dir);
        let err = |dir: &Path| Checkpoint::load(dir, &model).unwrap_err().to_string();

        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        let e = err(&dir);
        assert!(
            e.contains(&path.display().to_string()) && e.contains("is a device"),
            "{e}"
        );
        std::fs::remove_file(&path).unwrap();

        let fifo = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let e = err(&dir);
        assert!(e.contains("is a FIFO"), "{e}");
        std::fs::remove_file(&path).unwrap();

        std::fs::create_dir(&path).unwrap();
        let e = err(&dir);
        assert!(e.contains("is a directory"), "{e}");
        std::fs::remove_dir(&path).unwrap();

        // A sparse regular file one byte over the limit: refused before reading.
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(limit + 1).unwrap();
        let e = err(&dir);
        assert!(
            e.contains(&format!("{} bytes or more", limit + 1))
                && e.contains(&format!("larger than the {limit} bytes")),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_damaged_file_is_an_error_naming_the_file_and_field() {
        let (_, _, c) = sample(adam());
        let bytes = c.encode();
        let p = Path::new("/x/pacer-checkpoint.bin");
        let e = Checkpoint::decode(&bytes[..bytes.len() - 100], p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/x/pacer-checkpoint.bin") && e.contains("checksum"),
            "{e}"
        );
        let mut flipped = bytes.clone();
        flipped[200] ^= 1;
        let e = Checkpoint::decode(&flipped, p).unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");
        let e = Checkpoint::decode(b"PACRCKP", p).unwrap_err().to_string();
        assert!(e.contains("magic") && e.contains("truncated"), "{e}");
        let mut other = bytes;
        other[8] = 9;
        let e = Checkpoint::decode(&other, p).unwrap_err().to_string();
        assert!(e.contains("format 9"), "{e}");
    }

    #[test]
    fn a_checkpoint_of_another_run_is_refused_naming_what_differs() {
        let (data, model, c) = sample(adam());
        let dir = Path::new("/ckpt");
        c.check_matches(dir, &data, &model, &adam(), 3).unwrap();
        let wider = ModelSpec::new("mlp", data.train.dim, data.train.classes, 16).unwrap();
        let e = c
            .check_matches(dir, &data, &wider, &adam(), 3)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("its model is mlp (dim 64, classes 10, width 8)"),
            "{e}"
        );
        assert!(e.contains("width 16"), "{e}");
        let e = c
            .check_matches(dir, &data, &model, &adam(), 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("its seed is 3, this run's is 4"), "{e}");
        let e = c
            .check_matches(dir, &data, &model, &adam().with_lr(0.5), 3)
            .unwrap_err()
            .to_string();
        assert!(e.contains("optimiser"), "{e}");
        let mut other = data.clone();
        other.fingerprint ^= 1;
        let e = c
            .check_matches(dir, &other, &model, &adam(), 3)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("checkpoint_dir: /ckpt/pacer-checkpoint.bin") && e.contains("dataset"),
            "{e}"
        );
    }
}
