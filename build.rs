//! Compiles the public contract in `proto/` with protox (pure Rust, no system `protoc`) and writes
//! the file descriptor set that server reflection serves, plus one for the vendored Envoy
//! ext_authz contract in `proto/third_party/`.

use std::path::PathBuf;

/// The manual Authorizer server's routes, shared with the crate (`api::wire::routes`).
// The proto message names in them are for the contract test, not read here.
#[allow(dead_code)]
mod routes {
    include!("src/api/wire/routes.rs");
}

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

    // The `authz.v1.Authorizer` server once more, with the two decision methods taking the
    // request's bytes as received and answering with decisions encoded straight from the cache
    // (src/api/wire.rs): a cache hit then copies no string. The same routes, so the same
    // service to every client; included by `api::wire` (the prost server above is unused).
    // The routes are declared in src/api/wire/routes.rs, which tests/api/wire_contract.rs holds
    // to the service in the descriptor set.
    println!("cargo:rerun-if-changed=src/api/wire/routes.rs");
    let authorizer = routes::AUTHORIZER_ROUTES
        .iter()
        .fold(
            tonic_build::manual::Service::builder()
                .name(routes::AUTHORIZER_SERVICE)
                .package(routes::AUTHORIZER_PACKAGE),
            |service, route| service.method(wire_method(route)),
        )
        .build();
    tonic_build::manual::Builder::new()
        .build_client(false)
        .compile(&[authorizer]);

    // The subset of etcd's v3 API the etcd policy store speaks (src/store/etcd/): a client only,
    // compiled here like everything else, so no system `protoc` is needed.
    let etcd = protox::compile(["etcd/kv.proto"], ["proto/third_party"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(etcd)?;
    Ok(())
}

fn wire_method(route: &routes::Route) -> tonic_build::manual::Method {
    let mut method = tonic_build::manual::Method::builder()
        .name(route.method)
        .route_name(route.route)
        .input_type(route.input_type)
        .output_type(route.output_type)
        .codec_path(route.codec);
    if route.client_streaming {
        method = method.client_streaming();
    }
    if route.server_streaming {
        method = method.server_streaming();
    }
    method.build()
}
