//! Input generation: arbitrary bytes, and structure-aware mutations of valid seeds
//! (lines, fields, numbers, fixed-width integers), as proptest strategies so that a
//! failing input shrinks to few mutations of a seed.

use proptest::prelude::*;
use std::sync::Arc;

/// Largest input a mutation may produce (the repeat operator grows inputs to
/// check bounded work per byte).
pub const MAX_INPUT: usize = 64 << 10;

/// Numbers written in place of a number of a text input.
pub const TEXT_EDGES: &[&str] = &[
    "0",
    "-1",
    "1",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "9007199254740993",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "9223372036854775807",
    "1e308",
    "1e309",
    "-1e308",
    "1e-308",
    "5e-324",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "infinity",
    "-0",
    "0.0",
    "",
    "+1",
    "0x10",
    "1_000",
    "00000000000000000000000000001",
    "99999999999999999999999999999999999999999999999999999999999999999999999",
    "1e99999999999",
    "16777216",
    "16777217",
    "1000000",
    "1000001",
];

/// Integers written (little or big endian, 1–8 bytes) into a binary input.
pub const INT_EDGES: &[u64] = &[
    0,
    1,
    2,
    3,
    4,
    8,
    9,
    0x7f,
    0x80,
    0xff,
    0x100,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_fffe,
    0xffff_ffff,
    256 << 20,
    (256 << 20) + 1,
    1 << 32,
    1 << 53,
    u64::MAX,
    0x7ff8_0000_0000_0000, // f64 NaN
    0x7ff0_0000_0000_0000, // f64 inf
    0x7fc0_0000,           // f32 NaN
    0x7f80_0000,           // f32 inf
];

/// A position or choice: `index(n)` is in `0..n` (shrinks towards the first).
#[derive(Debug, Clone, Copy)]
pub struct Idx(pub usize);

impl Idx {
    pub fn index(&self, n: usize) -> usize {
        assert!(n > 0);
        self.0 % n
    }
}

fn idx() -> impl Strategy<Value = Idx> {
    any::<usize>().prop_map(Idx)
}

/// One structure-aware edit.
#[derive(Debug, Clone)]
pub enum MutOp {
    FlipBit(Idx, u8),
    SetByte(Idx, u8),
    Truncate(Idx),
    Insert(Idx, Vec<u8>),
    Delete(Idx, u8),
    DupLine(Idx),
    RemoveLine(Idx),
    SwapLines(Idx, Idx),
    SwapFields(Idx, Idx, Idx),
    /// Replace the k-th number of a text input by `TEXT_EDGES[i]`.
    Number(Idx, Idx),
    /// Write `INT_EDGES[i]` as `width` bytes at a position, little or big endian.
    Int(Idx, Idx, u8, bool),
    /// Repeat a chunk `times` times in place (bounded by [`MAX_INPUT`]).
    Repeat(Idx, u8, u16),
    /// Insert a chunk of another seed.
    Splice(Idx, Idx, Idx, u8),
}

fn op_strategy() -> impl Strategy<Value = MutOp> {
    prop_oneof![
        1 => (idx(), 0u8..8).prop_map(|(i, b)| MutOp::FlipBit(i, b)),
        1 => (idx(), any::<u8>()).prop_map(|(i, b)| MutOp::SetByte(i, b)),
        1 => idx().prop_map(MutOp::Truncate),
        1 => (idx(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, b)| MutOp::Insert(i, b)),
        1 => (idx(), 1u8..32).prop_map(|(i, n)| MutOp::Delete(i, n)),
        1 => idx().prop_map(MutOp::DupLine),
        1 => idx().prop_map(MutOp::RemoveLine),
        1 => (idx(), idx()).prop_map(|(a, b)| MutOp::SwapLines(a, b)),
        1 => (idx(), idx(), idx())
            .prop_map(|(l, a, b)| MutOp::SwapFields(l, a, b)),
        3 => (idx(), idx()).prop_map(|(k, e)| MutOp::Number(k, e)),
        3 => (idx(), idx(), prop::sample::select(vec![1u8, 2, 4, 8]), any::<bool>())
            .prop_map(|(p, e, w, be)| MutOp::Int(p, e, w, be)),
        1 => (idx(), 1u8..64, 1u16..2000).prop_map(|(p, l, t)| MutOp::Repeat(p, l, t)),
        1 => (idx(), idx(), idx(), 1u8..64)
            .prop_map(|(p, s, at, l)| MutOp::Splice(p, s, at, l)),
    ]
}

/// Inputs for a target with these valid `seeds`: a quarter arbitrary bytes (half
/// of them over the characters the formats use), the rest 1–8 edits of a seed.
pub fn inputs(seeds: Arc<Vec<Vec<u8>>>) -> BoxedStrategy<Vec<u8>> {
    assert!(!seeds.is_empty(), "a target needs at least one seed");
    let alphabet: Vec<u8> = b"0123456789.,:;-+eExX \t\n\r\"'{}[]()=#_abcdkntv".to_vec();
    let n = seeds.len();
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..512),
        1 => prop::collection::vec(prop::sample::select(alphabet), 0..512),
        6 => (0..n, prop::collection::vec(op_strategy(), 1..8))
            .prop_map(move |(s, ops)| apply(&seeds[s], &ops, &seeds)),
    ]
    .boxed()
}

fn at(i: &Idx, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        i.index(len + 1)
    }
}

/// Byte ranges of the lines of `b` (each with its `\n`).
fn lines(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut s = 0;
    for (i, &c) in b.iter().enumerate() {
        if c == b'\n' {
            out.push((s, i + 1));
            s = i + 1;
        }
    }
    if s < b.len() {
        out.push((s, b.len()));
    }
    out
}

/// Byte ranges of the numbers of `b`: runs of digits with `.`, `-`, `+`, `e`.
fn numbers(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let mut s = i;
            if s > 0 && b[s - 1] == b'-' {
                s -= 1;
            }
            let mut e = i;
            while e < b.len()
                && (b[e].is_ascii_digit()
                    || b[e] == b'.'
                    || ((b[e] == b'e' || b[e] == b'E')
                        && b.get(e + 1)
                            .is_some_and(|c| c.is_ascii_digit() || *c == b'-')))
            {
                e += 1;
                if b[e - 1] == b'e' || b[e - 1] == b'E' {
                    e += 1; // the exponent's first char
                }
            }
            let e = e.min(b.len());
            out.push((s, e));
            i = e.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// Swaps two lines (a last line without a newline keeps it that way).
fn swap_lines(b: &mut Vec<u8>, x: &Idx, y: &Idx) {
    let ls = lines(b);
    if ls.len() >= 2 {
        let (mut p, mut q) = (ls[x.index(ls.len())], ls[y.index(ls.len())]);
        if p.0 > q.0 {
            std::mem::swap(&mut p, &mut q);
        }
        if p != q {
            let strip = |r: (usize, usize)| {
                if b[r.1 - 1] == b'\n' {
                    (r.0, r.1 - 1)
                } else {
                    r
                }
            };
            let (p, q) = (strip(p), strip(q));
            let mut out = b[..p.0].to_vec();
            out.extend_from_slice(&b[q.0..q.1]);
            out.extend_from_slice(&b[p.1..q.0]);
            out.extend_from_slice(&b[p.0..p.1]);
            out.extend_from_slice(&b[q.1..]);
            *b = out;
        }
    }
}

/// Swaps two fields of one line, split at its most frequent separator.
fn swap_fields(b: &mut Vec<u8>, l: &Idx, x: &Idx, y: &Idx) {
    let ls = lines(b);
    if !ls.is_empty() {
        let (s, mut e) = ls[l.index(ls.len())];
        if b[e - 1] == b'\n' {
            e -= 1;
        }
        let line = &b[s..e];
        let sep = [b',', b'\t', b' ', b':']
            .into_iter()
            .max_by_key(|c| line.iter().filter(|x| *x == c).count())
            .unwrap_or(b',');
        let mut fields: Vec<Vec<u8>> = line.split(|c| *c == sep).map(<[u8]>::to_vec).collect();
        if fields.len() >= 2 {
            let (i, j) = (x.index(fields.len()), y.index(fields.len()));
            fields.swap(i, j);
            let joined = fields.join(&sep);
            b.splice(s..e, joined);
        }
    }
}

/// Applies `ops` to `seed` in order.
pub fn apply(seed: &[u8], ops: &[MutOp], seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for op in ops {
        match op {
            MutOp::FlipBit(i, bit) => {
                if !b.is_empty() {
                    let k = i.index(b.len());
                    b[k] ^= 1 << bit;
                }
            }
            MutOp::SetByte(i, v) => {
                if !b.is_empty() {
                    let k = i.index(b.len());
                    b[k] = *v;
                }
            }
            MutOp::Truncate(i) => {
                let k = at(i, b.len());
                b.truncate(k);
            }
            MutOp::Insert(i, bytes) => {
                let k = at(i, b.len());
                b.splice(k..k, bytes.iter().copied());
            }
            MutOp::Delete(i, n) => {
                if !b.is_empty() {
                    let k = i.index(b.len());
                    let e = (k + *n as usize).min(b.len());
                    b.drain(k..e);
                }
            }
            MutOp::DupLine(i) => {
                let ls = lines(&b);
                if !ls.is_empty() {
                    let (s, e) = ls[i.index(ls.len())];
                    let mut line = b[s..e].to_vec();
                    if line.last() != Some(&b'\n') {
                        line.insert(0, b'\n');
                    }
                    b.splice(e..e, line);
                }
            }
            MutOp::RemoveLine(i) => {
                let ls = lines(&b);
                if !ls.is_empty() {
                    let (s, e) = ls[i.index(ls.len())];
                    b.drain(s..e);
                }
            }
            MutOp::SwapLines(x, y) => swap_lines(&mut b, x, y),
            MutOp::SwapFields(l, x, y) => swap_fields(&mut b, l, x, y),
            MutOp::Number(k, e) => {
                let edge = TEXT_EDGES[e.index(TEXT_EDGES.len())].as_bytes();
                let ns = numbers(&b);
                if ns.is_empty() {
                    let p = at(k, b.len());
                    b.splice(p..p, edge.iter().copied());
                } else {
                    let (s, t) = ns[k.index(ns.len())];
                    b.splice(s..t, edge.iter().copied());
                }
            }
            MutOp::Int(p, e, width, be) => {
                let v = INT_EDGES[e.index(INT_EDGES.len())];
                let w = *width as usize;
                let bytes = if *be {
                    v.to_be_bytes()[8 - w..].to_vec()
                } else {
                    v.to_le_bytes()[..w].to_vec()
                };
                let k = if b.len() >= w {
                    p.index(b.len() - w + 1)
                } else {
                    0
                };
                let end = (k + w).min(b.len());
                b.splice(k..end, bytes);
            }
            MutOp::Repeat(p, len, times) => {
                if !b.is_empty() {
                    let k = p.index(b.len());
                    let e = (k + *len as usize).min(b.len());
                    let chunk = b[k..e].to_vec();
                    let room = MAX_INPUT.saturating_sub(b.len()) / chunk.len().max(1);
                    let n = (*times as usize).min(room);
                    let rep: Vec<u8> = chunk
                        .iter()
                        .copied()
                        .cycle()
                        .take(chunk.len() * n)
                        .collect();
                    b.splice(e..e, rep);
                }
            }
            MutOp::Splice(p, s, from, len) => {
                let other = &seeds[s.index(seeds.len())];
                if !other.is_empty() {
                    let f = from.index(other.len());
                    let e = (f + *len as usize).min(other.len());
                    let k = at(p, b.len());
                    b.splice(k..k, other[f..e].iter().copied());
                }
            }
        }
        if b.len() > MAX_INPUT {
            b.truncate(MAX_INPUT);
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_finds_numbers() {
        let b = b"a,-1.5e-3,x12\n7";
        let ns: Vec<&[u8]> = numbers(b).into_iter().map(|(s, e)| &b[s..e]).collect();
        assert_eq!(ns, vec![&b"-1.5e-3"[..], b"12", b"7"]);
    }

    #[test]
    fn line_and_field_edits() {
        let seeds = vec![b"h\na,b\nc,d\n".to_vec()];
        let i = Idx;
        let s = &seeds[0];
        assert_eq!(
            apply(s, &[MutOp::RemoveLine(Idx(0))], &seeds),
            b"a,b\nc,d\n"
        );
        assert_eq!(
            apply(s, &[MutOp::DupLine(Idx(0))], &seeds),
            b"h\nh\na,b\nc,d\n"
        );
        assert_eq!(
            apply(s, &[MutOp::SwapFields(i(4), Idx(0), i(7))], &seeds),
            b"h\nb,a\nc,d\n"
        );
        assert_eq!(
            apply(s, &[MutOp::SwapLines(Idx(0), i(7))], &seeds),
            b"a,b\nh\nc,d\n"
        );
        let big = apply(s, &[MutOp::Repeat(Idx(0), 4, 60000)], &seeds);
        assert!(big.len() > MAX_INPUT - 4 && big.len() <= MAX_INPUT);
    }
}
