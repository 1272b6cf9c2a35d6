//! The rules of each MLPerf Training ruleset as data.
//!
//! Each ruleset is a set of named rule files, as in the official checker's
//! `compliance_checker/training_X.Y.Z/*.yaml`: `common` always applies; a log's
//! `submission_division` adds `<division>_common`, its `submission_benchmark` adds
//! `<division>_<benchmark>`, and a closed ResNet's `opt_name` adds `closed_resnet_<opt>`.
//! A rule file is a list of key rules; a later file that names a key replaces the
//! findings earlier files made about that key (the official "overwritable" messages).
//! Rounds differ only in the groups they combine, so a new round is a new table here.

/// How often a key must occur.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Req {
    /// No count requirement (every occurrence is still checked).
    Any,
    ExactlyOne,
    AtLeastOne,
    /// This key or one of the others must occur at least once.
    AtLeastOneOf(&'static [&'static str]),
}

/// What a comparison on a metadata field needs when the field is absent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IfAbsent {
    Fail,
    Pass,
}

/// A check on one log line; each failing check is one finding.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Check {
    /// `value` is not the empty string.
    NotEmptyString,
    /// `value` is one of these strings.
    OneOf(&'static [&'static str]),
    /// `value` > 0.
    Positive,
    /// `value` == x.
    Equals(f64),
    /// `value` is x times a power of two (2^N, N any integer).
    PowerOfTwoTimes(f64),
    /// `value` is an integer multiple of x.
    MultipleOf(f64),
    /// metadata has at least one of these fields.
    MetaHasAny(&'static [&'static str]),
    /// when metadata has field `when`, it also has field `then`.
    MetaRequires {
        when: &'static str,
        then: &'static str,
    },
    /// metadata field > 0 (non-numbers fail).
    MetaPositive(&'static str, IfAbsent),
    /// metadata field >= 0 (non-numbers fail).
    MetaNonNegative(&'static str, IfAbsent),
    /// Ordering of the run's phases.
    Order(OrderCheck),
    /// init_stop within the division's init limit of the first init_start.
    InitWithinLimit,
}

/// Phase checks of the common rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OrderCheck {
    InitStarted,
    InitNotStopped,
    InitStopped,
    RunStarted,
    RunNotStarted,
}

/// What a line does to the checker's state after its checks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// submission_division: adds `<division>_common`, sets the init limit.
    Division,
    /// submission_benchmark: adds `<division>_<benchmark>`.
    Benchmark,
    /// opt_name (closed ResNet): adds `closed_resnet_<opt>`.
    Optimizer,
    InitStart,
    InitStop,
    RunStart,
    RunStop,
    /// weights_initialization: records metadata.tensor.
    RecordTensor,
}

/// At least one line of the key must have a numeric value in [min, below).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    pub min: Option<f64>,
    pub below: f64,
}

#[derive(Debug, Clone, Copy)]
pub struct KeyRule {
    pub key: &'static str,
    pub req: Req,
    pub checks: &'static [Check],
    pub action: Option<Action>,
    pub at_least_one: Option<Target>,
}

/// One rule file: groups of key rules, plus optionally the exact set of tensors that
/// weights_initialization must report.
#[derive(Debug, Clone, Copy)]
pub struct RuleFile {
    pub name: &'static str,
    pub groups: &'static [&'static [KeyRule]],
    pub expected_tensors: Option<&'static str>,
}

impl RuleFile {
    pub fn rules(&self) -> impl Iterator<Item = &'static KeyRule> + '_ {
        self.groups.iter().flat_map(|g| g.iter())
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Ruleset {
    pub name: &'static str,
    pub files: &'static [RuleFile],
}

impl Ruleset {
    pub fn file(&self, name: &str) -> Option<&'static RuleFile> {
        self.files.iter().find(|f| f.name == name)
    }

    /// Benchmarks this ruleset accepts in `division` (any benchmark, not only ours).
    pub fn benchmarks(&self, division: &str) -> &'static [&'static str] {
        let file = self.file(&format!("{division}_common"));
        for rule in file.into_iter().flat_map(|f| f.rules()) {
            if rule.key == "submission_benchmark" {
                for check in rule.checks {
                    if let Check::OneOf(list) = check {
                        return list;
                    }
                }
            }
        }
        &[]
    }
}

const fn rule(key: &'static str, req: Req, checks: &'static [Check]) -> KeyRule {
    KeyRule {
        key,
        req,
        checks,
        action: None,
        at_least_one: None,
    }
}

const fn acting(key: &'static str, req: Req, checks: &'static [Check], action: Action) -> KeyRule {
    KeyRule {
        key,
        req,
        checks,
        action: Some(action),
        at_least_one: None,
    }
}

use Check::*;
use OrderCheck::*;
use Req::*;

// ---- common.yaml building blocks ----

const DIVISION: &[KeyRule] = &[acting(
    "submission_division",
    ExactlyOne,
    &[OneOf(&["closed", "open"])],
    Action::Division,
)];

/// submission_org, _platform, _status: in common.yaml up to 4.0.0 (5.0.0 dropped them).
const SUBMISSION_META: &[KeyRule] = &[
    rule("submission_org", ExactlyOne, &[NotEmptyString]),
    rule("submission_platform", ExactlyOne, &[NotEmptyString]),
    rule(
        "submission_status",
        ExactlyOne,
        &[OneOf(&["cloud", "onprem", "preview", "research"])],
    ),
];

/// 4.1.0: submission_status left common.yaml; org and platform stayed (until 5.0.0).
const SUBMISSION_ORG_PLATFORM: &[KeyRule] = &[
    rule("submission_org", ExactlyOne, &[NotEmptyString]),
    rule("submission_platform", ExactlyOne, &[NotEmptyString]),
];

const TIMELINE: &[KeyRule] = &[
    rule("cache_clear", AtLeastOne, &[]),
    acting(
        "init_start",
        AtLeastOne,
        &[Order(InitNotStopped), Order(RunNotStarted)],
        Action::InitStart,
    ),
    acting(
        "init_stop",
        ExactlyOne,
        &[Order(InitStarted), Order(RunNotStarted), InitWithinLimit],
        Action::InitStop,
    ),
    acting(
        "run_start",
        ExactlyOne,
        &[Order(InitStopped)],
        Action::RunStart,
    ),
    acting(
        "run_stop",
        ExactlyOne,
        &[Order(RunStarted), MetaHasAny(&["status"])],
        Action::RunStop,
    ),
    rule("train_samples", ExactlyOne, &[NotEmptyString]),
    rule("eval_samples", ExactlyOne, &[NotEmptyString]),
];

/// 2.0.0 - 3.0.0: blocks count epochs only.
const BLOCKS_EPOCHS: &[KeyRule] = &[
    rule(
        "block_start",
        AtLeastOneOf(&["epoch_start"]),
        &[
            Order(RunStarted),
            MetaHasAny(&["epoch_count"]),
            MetaHasAny(&["first_epoch_num"]),
            MetaPositive("epoch_count", IfAbsent::Fail),
        ],
    ),
    rule(
        "block_stop",
        AtLeastOneOf(&["epoch_stop"]),
        &[MetaHasAny(&["first_epoch_num"])],
    ),
];

/// 3.1.0: blocks count epochs or steps.
const BLOCKS_STEPS: &[KeyRule] = &[
    rule(
        "block_start",
        AtLeastOneOf(&["epoch_start"]),
        &[
            Order(RunStarted),
            MetaHasAny(&["epoch_count", "step_num"]),
            MetaRequires {
                when: "epoch_count",
                then: "first_epoch_num",
            },
            MetaPositive("epoch_count", IfAbsent::Pass),
            MetaNonNegative("step_num", IfAbsent::Pass),
        ],
    ),
    rule(
        "block_stop",
        AtLeastOneOf(&["epoch_stop"]),
        &[MetaHasAny(&["first_epoch_num", "step_num"])],
    ),
];

/// 4.0.0 on: blocks count epochs or samples.
const BLOCKS_SAMPLES: &[KeyRule] = &[
    rule(
        "block_start",
        AtLeastOneOf(&["epoch_start"]),
        &[
            Order(RunStarted),
            MetaHasAny(&["epoch_count", "samples_count"]),
            MetaRequires {
                when: "epoch_count",
                then: "first_epoch_num",
            },
            MetaPositive("epoch_count", IfAbsent::Pass),
            MetaNonNegative("samples_count", IfAbsent::Pass),
        ],
    ),
    rule(
        "block_stop",
        AtLeastOneOf(&["epoch_stop"]),
        &[MetaHasAny(&["first_epoch_num", "samples_count"])],
    ),
];

const EPOCHS: &[KeyRule] = &[
    rule(
        "epoch_start",
        AtLeastOneOf(&["block_start"]),
        &[MetaHasAny(&["epoch_num"])],
    ),
    rule(
        "epoch_stop",
        AtLeastOneOf(&["block_stop"]),
        &[MetaHasAny(&["epoch_num"])],
    ),
];

/// 5.0.0: epochs may count samples.
const EPOCHS_SAMPLES: &[KeyRule] = &[
    rule(
        "epoch_start",
        AtLeastOneOf(&["block_start"]),
        &[MetaHasAny(&["epoch_num", "samples_count"])],
    ),
    rule(
        "epoch_stop",
        AtLeastOneOf(&["block_stop"]),
        &[MetaHasAny(&["epoch_num", "samples_count"])],
    ),
];

const EVALS_EPOCHS: &[KeyRule] = &[
    rule(
        "eval_start",
        AtLeastOneOf(&["block_start"]),
        &[MetaHasAny(&["epoch_num"])],
    ),
    rule(
        "eval_stop",
        AtLeastOneOf(&["block_stop"]),
        &[MetaHasAny(&["epoch_num"])],
    ),
    rule("eval_accuracy", AtLeastOne, &[MetaHasAny(&["epoch_num"])]),
];

const EVALS_STEPS: &[KeyRule] = &[
    rule(
        "eval_start",
        AtLeastOneOf(&["block_start"]),
        &[MetaHasAny(&["epoch_num", "step_num"])],
    ),
    rule(
        "eval_stop",
        AtLeastOneOf(&["block_stop"]),
        &[MetaHasAny(&["epoch_num", "step_num"])],
    ),
    rule(
        "eval_accuracy",
        AtLeastOne,
        &[MetaHasAny(&["epoch_num", "step_num"])],
    ),
];

const EVALS_SAMPLES: &[KeyRule] = &[
    rule(
        "eval_start",
        AtLeastOneOf(&["block_start"]),
        &[MetaHasAny(&["epoch_num", "samples_count"])],
    ),
    rule(
        "eval_stop",
        AtLeastOneOf(&["block_stop"]),
        &[MetaHasAny(&["epoch_num", "samples_count"])],
    ),
    rule(
        "eval_accuracy",
        AtLeastOne,
        &[MetaHasAny(&["epoch_num", "samples_count"])],
    ),
];

// ---- <division>_common.yaml ----

const GRAD_ACCUM: &[KeyRule] = &[rule("gradient_accumulation_steps", ExactlyOne, &[Positive])];

/// `submission_benchmark` must be one of the round's benchmarks; it adds the benchmark's
/// rule file.
macro_rules! benchmark_rule {
    ($list:expr) => {
        acting(
            "submission_benchmark",
            ExactlyOne,
            &[OneOf($list)],
            Action::Benchmark,
        )
    };
}

const BENCHMARKS_2_0: &[&str] = &[
    "resnet", "ssd", "maskrcnn", "minigo", "dlrm", "bert", "rnnt", "unet3d",
];
const BENCHMARKS_3_0: &[&str] = &[
    "resnet",
    "ssd",
    "maskrcnn",
    "gpt3",
    "dlrm_dcnv2",
    "bert",
    "rnnt",
    "unet3d",
];
const BENCHMARKS_3_1: &[&str] = &[
    "resnet",
    "ssd",
    "stable_diffusion",
    "maskrcnn",
    "gpt3",
    "dlrm_dcnv2",
    "bert",
    "rnnt",
    "unet3d",
];
const BENCHMARKS_4_0_CLOSED: &[&str] = &[
    "resnet",
    "ssd",
    "stable_diffusion",
    "maskrcnn",
    "gpt3",
    "dlrm_dcnv2",
    "bert",
    "rnnt",
    "unet3d",
    "gnn",
    "llama2_70b_lora",
];
const BENCHMARKS_4_0_OPEN: &[&str] = &[
    "resnet",
    "ssd",
    "stable_diffusion",
    "maskrcnn",
    "gpt3",
    "dlrm_dcnv2",
    "bert",
    "rnnt",
    "unet3d",
    "gnn",
];
const BENCHMARKS_5_0: &[&str] = &[
    "retinanet",
    "stable_diffusion",
    "dlrm_dcnv2",
    "bert",
    "rgat",
    "llama2_70b_lora",
    "llama31_405b",
];

const CLOSED_2_0: &[KeyRule] = &[benchmark_rule!(BENCHMARKS_2_0)];
const OPEN_2_0: &[KeyRule] = &[benchmark_rule!(BENCHMARKS_2_0)];
const CLOSED_3_0: &[KeyRule] = &[benchmark_rule!(BENCHMARKS_3_0)];
const OPEN_3_0: &[KeyRule] = &[benchmark_rule!(BENCHMARKS_3_0)];
const CLOSED_3_1: &[KeyRule] = &[benchmark_rule!(BENCHMARKS_3_1)];
const OPEN_3_1: &[KeyRule] = &[benchmark_rule!(BENCHMARKS_3_1)];
const CLOSED_4_0: &[KeyRule] = &[benchmark_rule!(BENCHMARKS_4_0_CLOSED)];
const OPEN_4_0: &[KeyRule] = &[benchmark_rule!(BENCHMARKS_4_0_OPEN)];
const CLOSED_5_0: &[KeyRule] = &[benchmark_rule!(BENCHMARKS_5_0)];
const OPEN_5_0: &[KeyRule] = &[benchmark_rule!(BENCHMARKS_5_0)];

// ---- benchmark rule files ----

const fn accuracy(min: Option<f64>) -> KeyRule {
    KeyRule {
        key: "eval_accuracy",
        req: AtLeastOne,
        checks: &[MetaHasAny(&["epoch_num"])],
        action: None,
        at_least_one: Some(Target { min, below: 1.0 }),
    }
}

/// Closed ResNet's quality target (ResNet-50 top-1).
pub const RESNET_TARGET: f64 = 0.7590;
/// Closed BERT's quality target (masked-LM accuracy).
pub const BERT_TARGET: f64 = 0.720;

const CLOSED_RESNET: &[KeyRule] = &[
    rule("global_batch_size", ExactlyOne, &[Positive]),
    acting(
        "opt_name",
        ExactlyOne,
        &[OneOf(&["sgd", "lars"])],
        Action::Optimizer,
    ),
    accuracy(Some(RESNET_TARGET)),
];

const WEIGHTS_INIT: &[KeyRule] = &[acting(
    "weights_initialization",
    AtLeastOne,
    &[MetaHasAny(&["tensor"])],
    Action::RecordTensor,
)];

const RESNET_LARS: &[KeyRule] = &[
    rule("lars_opt_base_learning_rate", ExactlyOne, &[]),
    rule("lars_opt_end_learning_rate", ExactlyOne, &[Equals(0.0001)]),
    rule(
        "lars_opt_learning_rate_decay_poly_power",
        ExactlyOne,
        &[Equals(2.0)],
    ),
    rule("lars_opt_learning_rate_decay_steps", ExactlyOne, &[]),
    rule("lars_epsilon", ExactlyOne, &[Equals(0.0)]),
    rule("lars_opt_learning_rate_warmup_epochs", ExactlyOne, &[]),
    rule("lars_opt_momentum", ExactlyOne, &[]),
    rule(
        "lars_opt_weight_decay",
        ExactlyOne,
        &[PowerOfTwoTimes(0.0001)],
    ),
];

const RESNET_SGD: &[KeyRule] = &[
    rule(
        "sgd_opt_base_learning_rate",
        ExactlyOne,
        &[MultipleOf(0.001)],
    ),
    rule("sgd_opt_end_learning_rate", ExactlyOne, &[Equals(0.0001)]),
    rule("sgd_opt_learning_rate_decay_poly_power", ExactlyOne, &[]),
    rule("sgd_opt_learning_rate_decay_steps", ExactlyOne, &[]),
    rule(
        "sgd_opt_weight_decay",
        ExactlyOne,
        &[PowerOfTwoTimes(0.0001)],
    ),
    rule("sgd_opt_momentum", ExactlyOne, &[]),
    rule("model_bn_span", ExactlyOne, &[]),
    rule("opt_learning_rate_warmup_epochs", ExactlyOne, &[]),
];

const OPEN_ACCURACY: &[KeyRule] = &[accuracy(None)];

const fn closed_bert(epsilon_key: &'static str) -> [KeyRule; 11] {
    [
        rule("global_batch_size", ExactlyOne, &[]),
        rule("opt_base_learning_rate", ExactlyOne, &[]),
        rule(epsilon_key, ExactlyOne, &[]),
        rule("opt_learning_rate_training_steps", ExactlyOne, &[]),
        rule("opt_learning_rate_warmup_steps", ExactlyOne, &[]),
        rule("num_warmup_steps", ExactlyOne, &[]),
        rule("start_warmup_step", ExactlyOne, &[]),
        rule("opt_lamb_beta_1", ExactlyOne, &[]),
        rule("opt_lamb_beta_2", ExactlyOne, &[]),
        rule("opt_lamb_weight_decay_rate", ExactlyOne, &[]),
        accuracy(Some(BERT_TARGET)),
    ]
}

/// 2.0.0 named the LAMB epsilon `opt_epsilon`; 2.1.0 on, `opt_lamb_epsilon`.
const CLOSED_BERT_2_0: &[KeyRule] = &closed_bert("opt_epsilon");
const CLOSED_BERT: &[KeyRule] = &closed_bert("opt_lamb_epsilon");

const RESNET_TENSORS: &str = include_str!("data/resnet_initialized_tensors.txt");
const BERT_TENSORS: &str = include_str!("data/bert_initialized_tensors.txt");

const fn file(name: &'static str, groups: &'static [&'static [KeyRule]]) -> RuleFile {
    RuleFile {
        name,
        groups,
        expected_tensors: None,
    }
}

/// The rule files shared by 2.0.0 and 2.1.0 beyond `common`, `<division>_common`.
macro_rules! resnet_bert_files {
    ($closed_resnet:expr, $closed_bert:expr) => {
        [
            $closed_resnet,
            file("closed_resnet_lars", &[RESNET_LARS]),
            file("closed_resnet_sgd", &[RESNET_SGD]),
            file("open_resnet", &[OPEN_ACCURACY]),
            $closed_bert,
            file("open_bert", &[OPEN_ACCURACY]),
        ]
    };
}

const fn concat<const N: usize>(a: [RuleFile; 3], b: [RuleFile; 6]) -> [RuleFile; N] {
    let mut out = [a[0]; N];
    let mut i = 0;
    while i < 3 {
        out[i] = a[i];
        i += 1;
    }
    while i < N {
        out[i] = b[i - 3];
        i += 1;
    }
    out
}

const V2_RESNET_BERT: [RuleFile; 6] = resnet_bert_files!(
    RuleFile {
        name: "closed_resnet",
        groups: &[WEIGHTS_INIT, CLOSED_RESNET],
        expected_tensors: Some(RESNET_TENSORS)
    },
    RuleFile {
        name: "closed_bert",
        groups: &[WEIGHTS_INIT, CLOSED_BERT],
        expected_tensors: Some(BERT_TENSORS)
    }
);
const V2_0_RESNET_BERT: [RuleFile; 6] = resnet_bert_files!(
    RuleFile {
        name: "closed_resnet",
        groups: &[WEIGHTS_INIT, CLOSED_RESNET],
        expected_tensors: Some(RESNET_TENSORS)
    },
    RuleFile {
        name: "closed_bert",
        groups: &[WEIGHTS_INIT, CLOSED_BERT_2_0],
        expected_tensors: Some(BERT_TENSORS)
    }
);
const V3_RESNET_BERT: [RuleFile; 6] = resnet_bert_files!(
    file("closed_resnet", &[CLOSED_RESNET]),
    file("closed_bert", &[CLOSED_BERT])
);

const COMMON_V2: RuleFile = file(
    "common",
    &[
        DIVISION,
        SUBMISSION_META,
        TIMELINE,
        BLOCKS_EPOCHS,
        EPOCHS,
        EVALS_EPOCHS,
    ],
);
const COMMON_V3_1: RuleFile = file(
    "common",
    &[
        DIVISION,
        SUBMISSION_META,
        TIMELINE,
        BLOCKS_STEPS,
        EPOCHS,
        EVALS_STEPS,
    ],
);
const COMMON_V4: RuleFile = file(
    "common",
    &[
        DIVISION,
        SUBMISSION_META,
        TIMELINE,
        BLOCKS_SAMPLES,
        EPOCHS,
        EVALS_SAMPLES,
    ],
);
const COMMON_V4_1: RuleFile = file(
    "common",
    &[
        DIVISION,
        SUBMISSION_ORG_PLATFORM,
        TIMELINE,
        BLOCKS_SAMPLES,
        EPOCHS,
        EVALS_SAMPLES,
    ],
);
const COMMON_V5: RuleFile = file(
    "common",
    &[
        DIVISION,
        TIMELINE,
        BLOCKS_SAMPLES,
        EPOCHS_SAMPLES,
        EVALS_SAMPLES,
    ],
);

const R2_0: [RuleFile; 9] = concat(
    [
        COMMON_V2,
        file("closed_common", &[CLOSED_2_0, GRAD_ACCUM]),
        file("open_common", &[OPEN_2_0]),
    ],
    V2_0_RESNET_BERT,
);
const R2_1: [RuleFile; 9] = concat(
    [
        COMMON_V2,
        file("closed_common", &[CLOSED_2_0, GRAD_ACCUM]),
        file("open_common", &[OPEN_2_0]),
    ],
    V2_RESNET_BERT,
);
const R3_0: [RuleFile; 9] = concat(
    [
        COMMON_V2,
        file("closed_common", &[CLOSED_3_0, GRAD_ACCUM]),
        file("open_common", &[OPEN_3_0]),
    ],
    V3_RESNET_BERT,
);
const R3_1: [RuleFile; 9] = concat(
    [
        COMMON_V3_1,
        file("closed_common", &[CLOSED_3_1, GRAD_ACCUM]),
        file("open_common", &[OPEN_3_1]),
    ],
    V3_RESNET_BERT,
);
const R4_0: [RuleFile; 9] = concat(
    [
        COMMON_V4,
        file("closed_common", &[CLOSED_4_0, GRAD_ACCUM]),
        file("open_common", &[OPEN_4_0]),
    ],
    V3_RESNET_BERT,
);
/// 4.1.0 still lists resnet in `<division>_common` but ships no ResNet rule files (the
/// official checker stops with an error on a ResNet log); BERT's files are 4.0.0's.
const R4_1: [RuleFile; 5] = [
    COMMON_V4_1,
    file("closed_common", &[CLOSED_4_0, GRAD_ACCUM]),
    file("open_common", &[OPEN_4_0]),
    file("closed_bert", &[CLOSED_BERT]),
    file("open_bert", &[OPEN_ACCURACY]),
];
/// 5.0.0 has no ResNet rule files (the round dropped the benchmark).
const R5_0: [RuleFile; 5] = [
    COMMON_V5,
    file("closed_common", &[CLOSED_5_0, GRAD_ACCUM]),
    file("open_common", &[OPEN_5_0]),
    file("closed_bert", &[CLOSED_BERT]),
    file("open_bert", &[OPEN_ACCURACY]),
];

/// Every ruleset this tool checks.
pub const RULESETS: &[Ruleset] = &[
    Ruleset {
        name: "2.0.0",
        files: &R2_0,
    },
    Ruleset {
        name: "2.1.0",
        files: &R2_1,
    },
    Ruleset {
        name: "3.0.0",
        files: &R3_0,
    },
    Ruleset {
        name: "3.1.0",
        files: &R3_1,
    },
    Ruleset {
        name: "4.0.0",
        files: &R4_0,
    },
    Ruleset {
        name: "4.1.0",
        files: &R4_1,
    },
    Ruleset {
        name: "5.0.0",
        files: &R5_0,
    },
];

/// The ruleset called `name`.
pub fn ruleset(name: &str) -> Option<&'static Ruleset> {
    RULESETS.iter().find(|r| r.name == name)
}

/// Names of the supported rulesets, for messages.
pub fn names() -> Vec<&'static str> {
    RULESETS.iter().map(|r| r.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ruleset_has_common_and_division_files() {
        for r in RULESETS {
            for name in [
                "common",
                "closed_common",
                "open_common",
                "closed_bert",
                "open_bert",
            ] {
                assert!(r.file(name).is_some(), "{} lacks {name}", r.name);
            }
            assert!(r.benchmarks("closed").contains(&"bert"));
        }
        assert!(ruleset("5.0.0").unwrap().file("closed_resnet").is_none());
        let r4_1 = ruleset("4.1.0").unwrap();
        assert!(r4_1.file("closed_resnet").is_none() && r4_1.file("open_resnet").is_none());
        assert!(r4_1.benchmarks("closed").contains(&"resnet"));
        let common_keys: Vec<&str> = r4_1
            .file("common")
            .unwrap()
            .rules()
            .map(|r| r.key)
            .collect();
        assert!(
            common_keys.contains(&"submission_org") && !common_keys.contains(&"submission_status")
        );
        assert!(!ruleset("5.0.0")
            .unwrap()
            .benchmarks("open")
            .contains(&"resnet"));
        assert!(ruleset("4.0.0")
            .unwrap()
            .benchmarks("closed")
            .contains(&"llama2_70b_lora"));
        assert!(!ruleset("4.0.0")
            .unwrap()
            .benchmarks("open")
            .contains(&"llama2_70b_lora"));
    }

    #[test]
    fn tensor_lists_have_the_official_sizes() {
        let count = |s: &str| {
            s.lines()
                .filter(|l| !l.starts_with('#') && !l.is_empty())
                .count()
        };
        assert_eq!(count(RESNET_TENSORS), 161);
        assert_eq!(count(BERT_TENSORS), 398);
    }
}
