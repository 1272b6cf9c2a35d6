//! A test that changes something process-wide (binds every thread of the process to some CPUs,
//! counts every host read in the process), or that another test's child process could break
//! (one that writes HDF5 files and reads them back: libhdf5 opens files without close-on-exec and
//! locks them, so a child started meanwhile keeps the writer's lock), runs alone in a process of
//! its own: the tests of a test binary's modules share one process, on parallel threads.

use std::process::Command;

/// Set in the process that runs one test alone, to that test's name.
const ALONE: &str = "MLPERF_RUN_TEST_ALONE";

/// `run_alone!();`, a test's first statement: the test runs alone in a process of its own
/// ([`in_own_process`], the test named by the function the macro stands in); elsewhere the test
/// returns once that process has run it and it passed.
#[allow(unused_macros)] // a test binary without such tests
macro_rules! run_alone {
    () => {{
        fn here() {}
        // "<binary>::<module>::<test>::here": the test is the segment before `here`
        let test = std::any::type_name_of_val(&here)
            .rsplit("::")
            .nth(1)
            .expect("run_alone! stands in a test function");
        if !$crate::common::alone::in_own_process(module_path!(), test) {
            return;
        }
    }};
}
#[allow(unused_imports)]
pub(crate) use run_alone;

/// True in the process of its own, where the test then runs its body. Elsewhere it runs this
/// test binary again with only this test (`module` is the caller's `module_path!()`, `test` its
/// function's name), waits, passes the child's output on, panics unless the child ran exactly
/// this one test and it passed, and returns false: the caller then returns.
pub fn in_own_process(module: &str, test: &str) -> bool {
    // module_path!() starts with the test binary's name; libtest names tests without it
    let name = match module.split_once("::") {
        Some((_, path)) => format!("{path}::{test}"),
        None => test.to_string(),
    };
    if std::env::var_os(ALONE).is_some_and(|v| v == name.as_str()) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(&exe)
        .args([
            name.as_str(),
            "--exact",
            "--test-threads",
            "1",
            "--nocapture",
        ])
        .env(ALONE, &name)
        .output()
        .unwrap_or_else(|e| panic!("running {} for {name}: {e}", exe.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{name}, in a process of its own:\n{stdout}{stderr}");
    assert!(
        out.status.success(),
        "{name} failed in its own process ({})",
        out.status
    );
    assert!(
        stdout.contains("test result: ok. 1 passed;"),
        "{name}: its own process did not run exactly this test:\n{stdout}"
    );
    false
}
