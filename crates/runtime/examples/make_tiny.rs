//! Regenerates the shipped `tiny` dataset under `crates/runtime/data/` from the seeded
//! generator (`pacer_runtime::data::synthetic_digits`):
//! `cargo run -p pacer-runtime --example make_tiny`
//! A unit test checks that the checked-in files equal the generator's output.

use pacer_runtime::data::{idx_bytes, synthetic_digits};
use std::io::Write;

fn gz(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let f = std::fs::File::create(path)?;
    // Fixed header (no mtime/name) so regeneration is byte-identical.
    let mut e = flate2::GzBuilder::new()
        .mtime(0)
        .write(f, flate2::Compression::best());
    e.write_all(bytes)?;
    e.finish()?;
    Ok(())
}

fn main() -> std::io::Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    for (name, n, seed) in [("train", 2000usize, 1u64), ("t10k", 500, 2)] {
        let (px, lb) = synthetic_digits(n, seed);
        gz(
            &dir.join(format!("tiny-{name}-images-idx3-ubyte.gz")),
            &idx_bytes(&[n, 8, 8], &px),
        )?;
        gz(
            &dir.join(format!("tiny-{name}-labels-idx1-ubyte.gz")),
            &idx_bytes(&[n], &lb),
        )?;
    }
    // The LIBSVM copy: 150 samples, sparse (zero pixels omitted), 1-based indices.
    let (px, lb) = synthetic_digits(150, 3);
    let mut s = String::new();
    for (i, l) in lb.iter().enumerate() {
        s.push_str(&l.to_string());
        for (j, &p) in px[i * 64..(i + 1) * 64].iter().enumerate() {
            if p != 0 {
                s.push_str(&format!(" {}:{:.3}", j + 1, p as f32 / 255.0));
            }
        }
        s.push('\n');
    }
    std::fs::write(dir.join("tiny.libsvm"), s)?;
    Ok(())
}
