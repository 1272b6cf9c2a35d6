//! Applies a ruleset's rule files (see [`super::tables`]) to a parsed log, with the
//! official checker's semantics: each rule file is a fresh pass over every line with its own
//! state; a line's checks run on every occurrence of its key, except `submission_*` keys,
//! which are checked (and act) on their first occurrence only; count requirements are judged
//! after the pass; a later rule file that names a key drops earlier findings about that key.

use super::python;
use super::tables::{Action, Check, IfAbsent, KeyRule, OrderCheck, Req, RuleFile, Ruleset, Target};
use super::{finding, Finding};
use crate::mllog::{Event, LogFile};
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};

/// Benchmarks mlperf-run has rules for.
pub const SUPPORTED_BENCHMARKS: &[&str] = &["resnet", "bert"];

/// Findings (verdict-deciding) and warnings (reported, not deciding) of one log.
#[derive(Debug, Default)]
pub struct Outcome {
    pub findings: Vec<Finding>,
    pub warnings: Vec<Finding>,
}

/// A finding and, when a later rule file for the same key may replace it, that key.
struct Pending {
    replaceable_by: Option<String>,
    finding: Finding,
}

/// The checker's per-rule-file state (`s` in the official rule files).
struct State {
    init_started: bool,
    init_stopped: bool,
    run_started: bool,
    first_init_start: f64,
    init_limit_minutes: f64,
    tensors: Vec<Value>,
}

impl Default for State {
    fn default() -> Self {
        State {
            init_started: false,
            init_stopped: false,
            run_started: false,
            first_init_start: 9e99,
            init_limit_minutes: 0.0,
            tensors: Vec::new(),
        }
    }
}

/// Run `ruleset` over `log`'s events.
pub fn evaluate(log: &LogFile, ruleset: &Ruleset) -> Outcome {
    let mut run = Run {
        ruleset,
        pending: Vec::new(),
        warnings: Vec::new(),
        queue: VecDeque::new(),
        queued: HashSet::new(),
    };
    run.enqueue("common".to_string());
    while let Some(name) = run.queue.pop_front() {
        match ruleset.file(&name) {
            Some(file) => run.apply_file(file, &log.events),
            None => run.missing_file(&name),
        }
    }
    Outcome {
        findings: run.pending.into_iter().map(|p| p.finding).collect(),
        warnings: run.warnings,
    }
}

struct Run<'r> {
    ruleset: &'r Ruleset,
    pending: Vec<Pending>,
    warnings: Vec<Finding>,
    queue: VecDeque<String>,
    queued: HashSet<String>,
}

impl Run<'_> {
    fn enqueue(&mut self, name: String) {
        if self.queued.insert(name.clone()) {
            self.queue.push_back(name);
        }
    }

    fn push(&mut self, replaceable: bool, f: Finding) {
        let replaceable_by = if replaceable { f.key.clone() } else { None };
        self.pending.push(Pending {
            replaceable_by,
            finding: f,
        });
    }

    /// A rule file that the log's division, benchmark or optimizer asks for but that this
    /// ruleset lacks. The official checker crashes there (no such YAML file).
    fn missing_file(&mut self, name: &str) {
        let (division, benchmark) = name.split_once('_').unwrap_or((name, ""));
        let accepted = self.ruleset.benchmarks(division);
        let message = if accepted.contains(&benchmark) && !SUPPORTED_BENCHMARKS.contains(&benchmark)
        {
            format!(
                "benchmark '{benchmark}' is valid in ruleset {} but mlperf-run checks only {}",
                self.ruleset.name,
                SUPPORTED_BENCHMARKS.join(" and ")
            )
        } else if let Ok(b) = crate::benchmarks::get(benchmark) {
            // e.g. resnet at 4.1.0: listed by the round, but without its rule files
            format!(
                "ruleset {} has no rules '{name}' (the official checker stops with an error here); \
                 {benchmark}'s rounds are {}: pass --ruleset {}",
                self.ruleset.name,
                b.round_names().join(", "),
                b.default_ruleset
            )
        } else {
            format!(
                "ruleset {} has no rules '{name}' (the official checker stops with an error here)",
                self.ruleset.name
            )
        };
        self.push(false, finding(None, None, "unsupported", message));
    }

    fn apply_file(&mut self, file: &RuleFile, events: &[Event]) {
        let rules: HashMap<&str, &KeyRule> = file.rules().map(|r| (r.key, r)).collect();
        self.pending.retain(|p| {
            p.replaceable_by
                .as_deref()
                .is_none_or(|k| !rules.contains_key(k))
        });
        let division = file.name.strip_suffix("_common").unwrap_or("");
        let mut state = State::default();
        let mut seen: HashMap<&str, Vec<&Event>> = HashMap::new();
        let mut acted_once: HashSet<&str> = HashSet::new();
        let mut target_hits: Vec<(&KeyRule, Target, usize, Option<usize>)> = Vec::new();

        for ev in events {
            let Some(rule) = rules.get(ev.key.as_str()).copied() else {
                continue;
            };
            seen.entry(rule.key).or_default().push(ev);
            let first_only = ev.key.contains("submission_");
            if !(first_only && acted_once.contains(rule.key)) {
                for check in rule.checks {
                    if let Some((rule_id, message)) = run_check(check, ev, &state) {
                        self.push(
                            true,
                            finding(Some(ev.line), Some(&ev.key), rule_id, message),
                        );
                    }
                }
                if let Some(action) = rule.action {
                    self.act(action, ev, &mut state, division);
                }
            }
            if let Some(target) = rule.at_least_one {
                let idx = match target_hits.iter().position(|t| t.0.key == rule.key) {
                    Some(i) => i,
                    None => {
                        target_hits.push((rule, target, 0, None));
                        target_hits.len() - 1
                    }
                };
                target_hits[idx].3 = Some(ev.line);
                match python::number(&ev.value) {
                    Some(x) if target.min.is_none_or(|m| x >= m) && x < target.below => target_hits[idx].2 += 1,
                    Some(_) => {}
                    None => self.push(
                        false,
                        finding(
                            Some(ev.line),
                            Some(&ev.key),
                            "value",
                            format!(
                                "{} is not a number; the official checker crashes comparing it with the target",
                                python::show(&ev.value)
                            ),
                        ),
                    ),
                }
            }
            if first_only {
                acted_once.insert(rule.key);
            }
        }

        for (rule, target, hits, last_line) in target_hits {
            if hits == 0 {
                let wanted = match target.min {
                    Some(min) => format!(">= {min:?} and < {:?}", target.below),
                    None => format!("< {:?}", target.below),
                };
                let message = format!(
                    "no {} reached the quality target: one must be {wanted} ({})",
                    rule.key, file.name
                );
                self.push(false, finding(last_line, Some(rule.key), "target", message));
            }
        }
        self.check_counts(file, &seen);
        if let Some(expected) = file.expected_tensors {
            self.check_tensors(
                file,
                expected,
                &state.tensors,
                seen.get("weights_initialization"),
            );
        }
    }

    fn act(&mut self, action: Action, ev: &Event, state: &mut State, division: &str) {
        let text = match &ev.value {
            Value::String(s) => s.clone(),
            other => python_str(other),
        };
        match action {
            Action::Division => {
                state.init_limit_minutes = if text == "open" { 240.0 } else { 30.0 };
                self.enqueue(format!("{text}_common"));
            }
            Action::Benchmark => self.enqueue(format!("{division}_{text}")),
            Action::Optimizer => self.enqueue(format!("closed_resnet_{text}")),
            Action::InitStart => {
                state.init_started = true;
                state.first_init_start = python::min(state.first_init_start, ev.time_ms);
            }
            Action::InitStop => state.init_stopped = true,
            Action::RunStart => state.run_started = true,
            Action::RunStop => {}
            Action::RecordTensor => {
                if let Some(t) = ev.meta("tensor") {
                    state.tensors.push(t.clone());
                }
            }
        }
    }

    fn check_counts(&mut self, file: &RuleFile, seen: &HashMap<&str, Vec<&Event>>) {
        let mut alternatives: Vec<Vec<&str>> = Vec::new();
        for rule in file.rules() {
            let found = seen.get(rule.key).map(Vec::as_slice).unwrap_or(&[]);
            match rule.req {
                Req::Any => {}
                Req::ExactlyOne if found.is_empty() => self.push(
                    true,
                    finding(
                        None,
                        Some(rule.key),
                        "exactly-one",
                        format!("required exactly one '{}' line, found none", rule.key),
                    ),
                ),
                Req::ExactlyOne if found.len() > 1 => {
                    let lines: Vec<String> = found.iter().map(|e| e.line.to_string()).collect();
                    let differing = found
                        .iter()
                        .find(|e| !python::equal(&e.value, &found[0].value));
                    match differing {
                        None => self.warnings.push(finding(
                            Some(found[1].line),
                            Some(rule.key),
                            "exactly-one",
                            format!(
                                "required exactly one '{}' line, found {} (lines {}) with the same value; \
                                 the official checker only warns",
                                rule.key,
                                found.len(),
                                lines.join(", ")
                            ),
                        )),
                        Some(other) => self.push(
                            true,
                            finding(
                                Some(other.line),
                                Some(rule.key),
                                "exactly-one",
                                format!(
                                    "required exactly one '{}' line, found {} (lines {}) with different values: {} vs {}",
                                    rule.key,
                                    found.len(),
                                    lines.join(", "),
                                    python::show(&found[0].value),
                                    python::show(&other.value)
                                ),
                            ),
                        ),
                    }
                }
                Req::ExactlyOne => {}
                Req::AtLeastOne if found.is_empty() => self.push(
                    true,
                    finding(
                        None,
                        Some(rule.key),
                        "at-least-one",
                        format!("required at least one '{}' line, found none", rule.key),
                    ),
                ),
                Req::AtLeastOne => {}
                Req::AtLeastOneOf(others) => {
                    let mut group: Vec<&str> = others.iter().copied().chain([rule.key]).collect();
                    group.sort_unstable();
                    group.dedup();
                    if !alternatives.contains(&group) {
                        alternatives.push(group);
                    }
                }
            }
        }
        for group in alternatives {
            if group.iter().all(|k| seen.get(k).is_none_or(Vec::is_empty)) {
                let names: Vec<String> = group.iter().map(|k| format!("'{k}'")).collect();
                self.push(
                    false,
                    finding(
                        None,
                        Some(group[0]),
                        "at-least-one",
                        format!(
                            "required at least one {} line, found none",
                            names.join(" or ")
                        ),
                    ),
                );
            }
        }
    }

    fn check_tensors(
        &mut self,
        file: &RuleFile,
        expected: &str,
        got: &[Value],
        lines: Option<&Vec<&Event>>,
    ) {
        let mut want: Vec<&str> = expected
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        want.sort_unstable();
        let mut have: Vec<&str> = Vec::with_capacity(got.len());
        for t in got {
            match t.as_str() {
                Some(s) => have.push(s),
                None => {
                    let message = format!("metadata.tensor {} is not a string", python::show(t));
                    self.push(
                        false,
                        finding(
                            None,
                            Some("weights_initialization"),
                            "weights-init",
                            message,
                        ),
                    );
                    return;
                }
            }
        }
        have.sort_unstable();
        if have == want {
            return;
        }
        let missing: Vec<&str> = want.iter().filter(|w| !have.contains(w)).copied().collect();
        let mut extra: Vec<&str> = Vec::new();
        for (i, h) in have.iter().enumerate() {
            if !want.contains(h) || (i > 0 && have[i - 1] == *h) {
                extra.push(h);
            }
        }
        let sample = |v: &[&str]| {
            let shown: Vec<&str> = v.iter().take(5).copied().collect();
            format!(
                "{}{}",
                shown.join(", "),
                if v.len() > 5 { ", ..." } else { "" }
            )
        };
        let mut parts = Vec::new();
        if !missing.is_empty() {
            parts.push(format!("{} missing ({})", missing.len(), sample(&missing)));
        }
        if !extra.is_empty() {
            parts.push(format!(
                "{} unexpected or repeated ({})",
                extra.len(),
                sample(&extra)
            ));
        }
        let line = lines.and_then(|l| l.first()).map(|e| e.line);
        let message = format!(
            "weights_initialization must report each of the {} model tensors exactly once ({}): {}",
            want.len(),
            file.name,
            parts.join("; ")
        );
        self.push(
            false,
            finding(
                line,
                Some("weights_initialization"),
                "weights-init",
                message,
            ),
        );
    }
}

/// Python's `str(v)` for the values a rule file name is formatted from.
fn python_str(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        other => other.to_string(),
    }
}

/// One check on one line: None when it holds, else (rule id, message).
fn run_check(check: &Check, ev: &Event, state: &State) -> Option<(&'static str, String)> {
    let v = &ev.value;
    let num = python::number(v);
    let value_fail = |what: String| Some(("value", format!("{} {what}", python::show(v))));
    match *check {
        Check::NotEmptyString => {
            (v.as_str() == Some("")).then(|| ("value", "value must not be empty".to_string()))
        }
        Check::OneOf(list) => match v.as_str() {
            Some(s) if list.contains(&s) => None,
            _ => value_fail(format!("is not one of: {}", list.join(", "))),
        },
        Check::Positive => match num {
            Some(x) if x > 0.0 => None,
            _ => value_fail("must be a number > 0".into()),
        },
        Check::Equals(want) => match num {
            Some(x) if x == want => None,
            _ => value_fail(format!("must equal {want}")),
        },
        Check::PowerOfTwoTimes(base) => match num {
            Some(x) if python::is_power_of_two_multiple(x, base) => None,
            _ => value_fail(format!("must be {base} * 2^N for an integer N")),
        },
        Check::MultipleOf(step) => match num {
            Some(x) if python::is_integer(x / step) => None,
            _ => value_fail(format!("must be a multiple of {step}")),
        },
        Check::MetaHasAny(fields) => {
            if fields.iter().any(|f| ev.meta(f).is_some()) {
                None
            } else {
                let names: Vec<String> = fields.iter().map(|f| format!("'{f}'")).collect();
                Some((
                    "metadata",
                    format!("metadata must have {}", names.join(" or ")),
                ))
            }
        }
        Check::MetaRequires { when, then } => (ev.meta(when).is_some() && ev.meta(then).is_none())
            .then(|| {
                (
                    "metadata",
                    format!("metadata has '{when}' but not '{then}'"),
                )
            }),
        Check::MetaPositive(field, absent) => meta_compare(ev, field, absent, |x| x > 0.0, "> 0"),
        Check::MetaNonNegative(field, absent) => {
            meta_compare(ev, field, absent, |x| x >= 0.0, ">= 0")
        }
        Check::Order(order) => {
            let (ok, message) = match order {
                OrderCheck::InitStarted => (state.init_started, "comes before any init_start"),
                OrderCheck::InitNotStopped => (!state.init_stopped, "comes after init_stop"),
                OrderCheck::InitStopped => (state.init_stopped, "comes before init_stop"),
                OrderCheck::RunStarted => (state.run_started, "comes before run_start"),
                OrderCheck::RunNotStarted => (!state.run_started, "comes after run_start"),
            };
            (!ok).then(|| ("order", message.to_string()))
        }
        Check::InitWithinLimit => {
            let limit_ms = state.init_limit_minutes * 60.0 * 1e3;
            let elapsed = ev.time_ms - state.first_init_start;
            if elapsed < limit_ms {
                None
            } else if state.init_limit_minutes == 0.0 {
                Some((
                    "init-time",
                    "init_stop comes before submission_division, so no init time is allowed".into(),
                ))
            } else {
                Some((
                    "init-time",
                    format!(
                        "init took {:.2} min from the first init_start; the limit is {} min",
                        elapsed / 60000.0,
                        state.init_limit_minutes
                    ),
                ))
            }
        }
    }
}

fn meta_compare(
    ev: &Event,
    field: &str,
    absent: IfAbsent,
    ok: impl Fn(f64) -> bool,
    wanted: &str,
) -> Option<(&'static str, String)> {
    match ev.meta(field) {
        None if absent == IfAbsent::Pass => None,
        None => Some(("metadata", format!("metadata must have '{field}' {wanted}"))),
        Some(v) => match python::number(v) {
            Some(x) if ok(x) => None,
            _ => Some((
                "metadata",
                format!(
                    "metadata '{field}' = {} must be a number {wanted}",
                    python::show(v)
                ),
            )),
        },
    }
}
