//! mlperf-run: the command line. Dispatch only; the subcommands and their work live in the
//! library ([`mlperf_run::cli`]).

fn main() -> std::process::ExitCode {
    mlperf_run::cli::main()
}
