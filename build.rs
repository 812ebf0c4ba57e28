//! Compiles `proto/` with protox (pure Rust, no system `protoc`) and generates
//! the tonic services. The encoded descriptor set is written to OUT_DIR for
//! server reflection.
use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/solus/v1/deduper.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    std::fs::write(out.join("solus_descriptor.bin"), prost::Message::encode_to_vec(&fds))?;
    // `bytes` for entities: decoded zero-copy from the request buffer.
    tonic_prost_build::configure().bytes(".").compile_fds(fds)?;
    Ok(())
}
