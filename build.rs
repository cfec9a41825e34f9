//! Compiles the public contract in `proto/` with protox (pure Rust, no system `protoc`) and writes
//! the file descriptor set that server reflection serves, plus one for the vendored Envoy
//! ext_authz contract in `proto/third_party/`.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/authz/v1/authz.proto"];
    println!("cargo:rerun-if-changed=proto");

    let file_descriptors = protox::compile(protos, ["proto"])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptor_path = out_dir.join("authz_descriptor.bin");
    std::fs::write(
        &descriptor_path,
        prost::Message::encode_to_vec(&file_descriptors),
    )?;

    // Envoy's ext_authz contract: only its descriptor is needed (the Rust types come from
    // envoy-types), so reflection can list and describe `envoy.service.auth.v3.Authorization`.
    let envoy_descriptors = protox::compile(
        ["envoy/service/auth/v3/external_auth.proto"],
        ["proto/third_party"],
    )?;
    std::fs::write(
        out_dir.join("envoy_descriptor.bin"),
        prost::Message::encode_to_vec(&envoy_descriptors),
    )?;

    tonic_prost_build::configure()
        // Decodes from contiguous bytes instead of through tonic's buffer (src/proto_codec.rs).
        .codec_path("crate::proto_codec::SliceCodec")
        .build_client(true)
        .build_server(true)
        .compile_fds(file_descriptors)?;
    Ok(())
}
