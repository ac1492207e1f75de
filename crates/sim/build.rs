//! Embeds every recorded quality profile in `data/slaq/*.csv` (see `src/quality.rs`),
//! so that adding a profile needs no code change.

use std::fmt::Write;

fn main() {
    let dir = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("data/slaq");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut names: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "csv"))
                .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let mut out = String::from(
        "/// Recorded quality profiles: (name, CSV text).\npub const EMBEDDED_QUALITY: &[(&str, &str)] = &[\n",
    );
    for (name, path) in &names {
        println!("cargo:rerun-if-changed={}", path.display());
        writeln!(
            out,
            "    ({name:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .unwrap();
    }
    out.push_str("];\n");
    let dest = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("slaq_profiles.rs");
    std::fs::write(dest, out).unwrap();
}
