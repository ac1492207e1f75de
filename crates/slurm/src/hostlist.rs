//! Slurm host lists: `n[1-3,7],gpu01` ↔ `["n1", "n2", "n3", "n7", "gpu01"]`.

use crate::SlurmError;

/// At most this many names from one host list, so a hostile `n[1-999999999]` cannot take
/// unbounded memory.
pub const MAX_HOSTS: usize = 65_536;

/// Expands a Slurm host list (`n[1-3,5],m07`, zero padding kept: `n[01-03]`) into names.
///
/// ```
/// let hosts = pacer_slurm::expand_hostlist("n[1-3],gpu[08-10],x").unwrap();
/// assert_eq!(hosts, ["n1", "n2", "n3", "gpu08", "gpu09", "gpu10", "x"]);
/// ```
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, SlurmError> {
    let bad = |why: &str| SlurmError::Parse {
        what: format!("host list `{list}`"),
        why: why.to_string(),
    };
    let mut out = Vec::new();
    for item in split_top_level(list).map_err(|e| bad(&e))? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let Some(open) = item.find('[') else {
            out.push(item.to_string());
            continue;
        };
        let close = item.rfind(']').ok_or_else(|| bad("`[` without `]`"))?;
        if close != item.len() - 1 || close < open {
            return Err(bad(
                "text after `]` (only one bracket group per name is supported)",
            ));
        }
        let prefix = &item[..open];
        for range in item[open + 1..close].split(',') {
            let (lo, hi) = match range.split_once('-') {
                Some((lo, hi)) => (lo, hi),
                None => (range, range),
            };
            let width = lo.len();
            let parse = |s: &str| {
                s.parse::<u64>()
                    .map_err(|_| bad(&format!("`{range}` is not a number or a range a-b")))
            };
            let (a, b) = (parse(lo)?, parse(hi)?);
            if b < a {
                return Err(bad(&format!("range `{range}` runs backwards")));
            }
            if (b - a) as usize >= MAX_HOSTS.saturating_sub(out.len()) {
                return Err(bad(&format!("more than {MAX_HOSTS} hosts")));
            }
            for i in a..=b {
                out.push(format!("{prefix}{i:0width$}"));
            }
        }
    }
    Ok(out)
}

/// Splits at commas outside brackets.
fn split_top_level(list: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0u32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1).ok_or("`]` without `[`")?,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("`[` without `]`".into());
    }
    parts.push(&list[start..]);
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn expands_ranges_lists_and_padding() {
        assert_eq!(expand_hostlist("n[1-2]").unwrap(), ["n1", "n2"]);
        assert_eq!(
            expand_hostlist("n[1,3-4],m").unwrap(),
            ["n1", "n3", "n4", "m"]
        );
        assert_eq!(expand_hostlist("g[09-11]").unwrap(), ["g09", "g10", "g11"]);
        assert_eq!(expand_hostlist("").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn rejects_malformed_lists() {
        for bad in [
            "n[1-",
            "n1]",
            "n[2-1]",
            "n[a-b]",
            "n[1-2]x",
            "n[0-99999999999]",
        ] {
            let err = expand_hostlist(bad).unwrap_err().to_string();
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }

    proptest! {
        #[test]
        fn comma_joined_names_expand_to_themselves(ids in proptest::collection::vec(0u32..1000, 0..20)) {
            let names: Vec<String> = ids.iter().map(|i| format!("node{i}")).collect();
            prop_assert_eq!(expand_hostlist(&names.join(",")).unwrap(), names);
        }

        #[test]
        fn a_range_has_its_length(a in 0u64..1000, len in 1u64..200) {
            let hosts = expand_hostlist(&format!("n[{a}-{}]", a + len - 1)).unwrap();
            prop_assert_eq!(hosts.len() as u64, len);
        }
    }
}
