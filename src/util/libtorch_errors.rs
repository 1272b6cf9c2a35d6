//! Errors inside a training run never panic out of the process: tch's non-fallible ops panic on
//! a libtorch error (CUDA out of memory, an invalid device), so the trainer runs the workload
//! under [`catching`], which turns such a panic into an error carrying libtorch's own message
//! (without its C++ backtrace) and keeps the panic's report off the terminal. The engine then
//! ends the run with `run_stop` aborted and the set goes on, as for any other error.

use anyhow::{anyhow, Result};
use std::cell::{Cell, RefCell};
use std::sync::Once;

thread_local! {
    static GUARDED: Cell<u32> = const { Cell::new(0) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Runs `f`; a panic inside becomes an error with a clean message.
pub fn catching<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.with(|g| g.get()) > 0 {
                let msg = payload_text(info.payload());
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(msg));
            } else {
                previous(info);
            }
        }));
    });
    GUARDED.with(|g| g.set(g.get() + 1));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(g.get() - 1));
    match r {
        Ok(r) => r,
        Err(payload) => {
            let raw = LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_else(|| payload_text(payload.as_ref()));
            Err(anyhow!("libtorch error: {}", clean(&raw)))
        }
    }
}

fn payload_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// libtorch's message out of tch's `...: Torch("MESSAGE\nException raised from ...")`: the
/// text inside, up to the C++ backtrace, with escapes undone.
pub fn clean(raw: &str) -> String {
    let inner = match raw.find("Torch(\"") {
        Some(i) => &raw[i + 7..],
        None => raw,
    };
    let inner = inner.strip_suffix("\")").unwrap_or(inner);
    let text = inner.replace("\\n", "\n").replace("\\\"", "\"");
    let mut out = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with("Exception raised from") || l.starts_with("frame #") {
            break;
        }
        if !l.is_empty() {
            out.push(l.to_string());
        }
    }
    let joined = out.join(" ");
    joined.trim_end_matches("\")").trim().to_string()
}

/// Whether `e` (its whole chain) is the device running out of memory.
pub fn is_out_of_memory(e: &anyhow::Error) -> bool {
    format!("{e:#}").contains("out of memory")
}

/// Adds what to do to an out-of-memory error: the per-process batch and how to spread it.
pub fn advise(e: anyhow::Error, per_process_batch: Option<u64>, world: usize) -> anyhow::Error {
    if !is_out_of_memory(&e) {
        return e;
    }
    let text = format!("{e:#}");
    let batch = per_process_batch
        .map(|b| format!(" at a per-process batch of {b} ({world} process(es))"))
        .unwrap_or_default();
    anyhow!(
        "{text}\nThe device ran out of memory{batch}: spread the global batch over more GPUs, one \
         process each (`mlperf-run launch --nproc-per-node N -- <the same command>`), or lower \
         train.global_batch_size / raise train.gradient_accumulation_steps"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtorch_messages_lose_the_backtrace() {
        let raw = "called `Result::unwrap()` on an `Err` value: Torch(\"CUDA out of memory. Tried to allocate 3.06 GiB.\\nException raised from malloc at c10/cuda/CUDACachingAllocator.cpp:1234 (most recent call first):\\nframe #0: c10::Error::Error\\nframe #1: foo\")";
        assert_eq!(
            clean(raw),
            "CUDA out of memory. Tried to allocate 3.06 GiB."
        );
    }

    #[test]
    fn panics_become_errors_without_a_report() {
        let e = catching(|| -> Result<()> {
            let _ = tch::Tensor::zeros([2], (tch::Kind::Float, tch::Device::Cpu)).view([3]);
            Ok(())
        })
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("libtorch error: "), "{e}");
        assert!(e.contains("shape '[3]' is invalid"), "{e}");
        assert!(!e.contains("frame #"), "{e}");
        assert_eq!(catching(|| Ok(5)).unwrap(), 5);
    }

    #[test]
    fn out_of_memory_names_the_batch_and_the_launcher() {
        let e = advise(
            anyhow!("libtorch error: CUDA out of memory. Tried"),
            Some(3264),
            1,
        );
        let t = e.to_string();
        assert!(t.contains("per-process batch of 3264"), "{t}");
        assert!(t.contains("mlperf-run launch --nproc-per-node N"), "{t}");
        let other = advise(anyhow!("disk full"), Some(8), 1).to_string();
        assert_eq!(other, "disk full");
    }
}
