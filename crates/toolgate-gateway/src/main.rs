//! The `toolgate` binary.

// A server allocates per request; mimalloc keeps that cheap under concurrency. Built
// without its transparent huge pages (`no_thp`): with them, each 2 MiB region it touched
// stayed resident, 16 MiB before the first call; without, the gateway's memory under load is
// a third lower for no measurable CPU per call (docs/performance.md, "Gateway memory").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    toolgate_gateway::cli::main()
}
