//! Compiles `proto/bench.proto` with protox (a protobuf compiler in Rust), so no
//! `protoc` binary is needed, then generates the tonic client and server from the
//! descriptor set.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/bench.proto");
    let fds = protox::compile(["bench.proto"], ["proto"])?;
    tonic_prost_build::configure()
        // `bytes` fields as `bytes::Bytes`: decoded without a copy out of tonic's
        // receive buffer, and one encoded parameter buffer shared by every request.
        .bytes(".pacer.bench")
        .compile_fds(fds)?;
    Ok(())
}
