//! The `toolgate` binary.

// A server allocates per request; mimalloc keeps that cheap under concurrency.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    toolgate_gateway::cli::main()
}
