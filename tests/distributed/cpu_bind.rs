//! `cpu_bind = "slices"` binds the whole process, in a process of its own: the binding narrows
//! every thread of the process, and the other modules of this test binary run on parallel
//! threads of the same process, so the test runs alone in a process started for it
//! (`common::alone`).

use crate::common::alone::run_alone;

use mlperf_run::cpu_bind::{
    apply, cores, current_affinity, format_cpu_list, launcher_bound, plan, set_process_affinity,
    CpuBind, LocalGpus,
};
use std::path::Path;
use std::sync::mpsc;

/// Runs `bind` while another thread, started before it, waits; returns what `bind` returned and
/// that thread's CPUs afterwards.
fn with_a_thread_started_before<T>(bind: impl FnOnce() -> T) -> (T, Vec<usize>) {
    let (ask, asked) = mpsc::channel::<()>();
    let (tell, told) = mpsc::channel();
    let earlier = std::thread::spawn(move || {
        asked.recv().unwrap();
        tell.send(current_affinity().unwrap()).unwrap();
    });
    let out = bind();
    ask.send(()).unwrap();
    let cpus = told.recv().unwrap();
    earlier.join().unwrap();
    (out, cpus)
}

/// The binding itself, whatever the slices came to (on one core they are all of it): every
/// thread of the process moves to the first of `cpus`.
fn the_whole_process_goes_to_one_cpu(cpus: &[usize]) {
    if cpus.len() < 2 {
        eprintln!("one CPU: binding the process cannot be told from leaving it");
        return;
    }
    let (others, earlier) = with_a_thread_started_before(|| set_process_affinity(&cpus[..1]));
    let others = others.unwrap();
    assert!(others.failures.is_empty(), "{others:?}");
    assert!(
        others.bound >= 1,
        "the thread started before was not bound: {others:?}"
    );
    assert_eq!(
        earlier,
        cpus[..1],
        "the thread started before kept its CPUs"
    );
    assert_eq!(current_affinity().unwrap(), cpus[..1]);
}

/// Slices bind an unbound process to its share of whole cores: the calling thread, the threads
/// it starts afterwards, and the threads that were running before (a process group's, started
/// before the trainer builds its workload).
#[test]
fn slices_bind_every_thread_of_the_process_to_its_share() {
    run_alone!();
    let allowed = current_affinity().unwrap();
    let bound_before = launcher_bound().unwrap();
    let (said, earlier_now) = with_a_thread_started_before(|| {
        apply(CpuBind::Slices, 1, 2, &LocalGpus::default())
            .unwrap()
            .message
    });
    let now = current_affinity().unwrap();
    let later_now = std::thread::spawn(|| current_affinity().unwrap())
        .join()
        .unwrap();
    the_whole_process_goes_to_one_cpu(&now);
    if bound_before {
        eprintln!("the test process is bound to some CPUs: nothing to slice");
        assert!(said.contains("left as started"), "{said}");
        assert_eq!(now, allowed);
        assert_eq!(earlier_now, allowed);
        return;
    }
    let sysfs = Path::new("/sys/devices/system/cpu");
    let expected = plan(&[allowed.clone(), allowed.clone()], 1, |c| cores(c, sysfs));
    assert_eq!(now, expected, "{said}");
    assert!(
        said.contains(&format!(
            "local rank 1 of 2 on CPUs {}",
            format_cpu_list(&now)
        )),
        "{said}"
    );
    assert_eq!(
        earlier_now, now,
        "the thread started earlier kept its CPUs: {said}"
    );
    assert_eq!(later_now, now, "a thread started later: {said}");
    assert!(said.contains("other thread(s)"), "{said}");
    assert!(!said.contains("keep their CPUs"), "{said}");
    if cores(&allowed, sysfs).len() >= 2 {
        assert!(
            now.len() < allowed.len(),
            "a half of {allowed:?} is smaller: {now:?}"
        );
    }
}
