//! `authzd-loadgen`: the same gRPC load against authzd and against a no-op tonic server, side
//! by side in one run (see `docs/loadgen.md`). Exit 0 when every answer was right, 1 when any
//! call failed or answered wrongly (or the run could not be made), 2 on a usage error.

use std::process::ExitCode;

use authzd::loadgen::{self, Args};
use clap::Parser;

/// mimalloc instead of glibc malloc: per-thread free lists make the many short-lived strings of a
/// request (decode, response) cheap on tokio's worker threads. The load generator uses it too,
/// so its in-process no-op server and authzd run on the same allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(dir) = &args.write_policy {
        return match loadgen::write_policy(&args, dir) {
            Ok(file) => {
                println!("{}", file.display());
                ExitCode::SUCCESS
            }
            Err(error) => fail(&error),
        };
    }
    if args.serve_noop {
        return serve_noop(&args);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("authzd-loadgen: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let report = match runtime.block_on(loadgen::run(&args)) {
        Ok(report) => report,
        Err(error) => return fail(&error),
    };
    if args.json {
        match report.to_json() {
            Ok(json) => println!("{json}"),
            Err(error) => return fail(&error),
        }
    } else {
        print!("{}", report.to_text());
    }
    match report.errors() {
        0 => ExitCode::SUCCESS,
        errors => {
            eprintln!("authzd-loadgen: {errors} failed calls or wrong answers");
            ExitCode::from(1)
        }
    }
}

/// `--serve-noop`: the server runs on its own thread; this one only keeps the process alive.
fn serve_noop(args: &Args) -> ExitCode {
    let listen = match &args.unix {
        Some(path) => loadgen::noop::Listen::Unix(path.clone()),
        None => loadgen::noop::Listen::Tcp,
    };
    let server = match loadgen::noop::NoopServer::start(listen) {
        Ok(server) => server,
        Err(error) => return fail(&error),
    };
    println!("{}", server.endpoint());
    loop {
        std::thread::park();
    }
}

fn fail(error: &loadgen::LoadgenError) -> ExitCode {
    eprintln!("authzd-loadgen: {error}");
    ExitCode::from(error.exit_code())
}
