//! The MLPerf Training system description (`systems/<system>.json`): its 33 fields in the
//! checker's order, the status strings of ruleset >= 4.0, user overrides from a TOML file, and
//! the typing the official checkers rely on (strings they join, integers they parse).

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};
use std::path::Path;

/// The 33 fields, in the order of `mlperf_logging.system_desc_checker`.
pub const FIELDS: [&str; 33] = [
    "submitter",
    "division",
    "status",
    "system_name",
    "number_of_nodes",
    "host_processors_per_node",
    "host_processor_model_name",
    "host_processor_core_count",
    "host_processor_vcpu_count",
    "host_processor_frequency",
    "host_processor_caches",
    "host_processor_interconnect",
    "host_memory_capacity",
    "host_storage_type",
    "host_storage_capacity",
    "host_networking",
    "host_networking_topology",
    "host_memory_configuration",
    "accelerators_per_node",
    "accelerator_model_name",
    "accelerator_host_interconnect",
    "accelerator_frequency",
    "accelerator_on-chip_memories",
    "accelerator_memory_configuration",
    "accelerator_memory_capacity",
    "accelerator_interconnect",
    "accelerator_interconnect_topology",
    "cooling",
    "hw_notes",
    "framework",
    "other_software_stack",
    "operating_system",
    "sw_notes",
];

/// Fields that must parse as integers (the result summarizer calls `int()` on them).
pub const INTEGER_FIELDS: [&str; 3] = [
    "number_of_nodes",
    "host_processors_per_node",
    "accelerators_per_node",
];

/// The only field that may be a table (object) instead of a string.
pub const TABLE_FIELD: &str = "other_software_stack";

/// `status` values accepted by the ruleset >= 4.0 system description checker.
pub const STATUSES: [&str; 4] = [
    "Available on-premise",
    "Available cloud",
    "Preview",
    "Research, Development, or Internal (RDI)",
];

/// The exact >= 4.0 status for a user's spelling: short forms (onprem, cloud, preview, rdi,
/// research) and the full strings, case-insensitively.
pub fn normalize_status(input: &str) -> Result<&'static str> {
    let s = input.trim().to_ascii_lowercase();
    let status = match s.as_str() {
        "onprem" | "on-prem" | "on-premise" | "available on-premise" => STATUSES[0],
        "cloud" | "available cloud" => STATUSES[1],
        "preview" => STATUSES[2],
        "rdi" | "research" | "research, development, or internal (rdi)" => STATUSES[3],
        _ => bail!(
            "invalid status '{input}': use one of onprem, cloud, preview, rdi (written as \"{}\")",
            STATUSES.join("\", \"")
        ),
    };
    Ok(status)
}

/// The `submission_status` a log carries for a system status (compliance rule of 4.0.0).
pub fn log_status_for(status: &str) -> Option<&'static str> {
    match status {
        s if s == STATUSES[0] => Some("onprem"),
        s if s == STATUSES[1] => Some("cloud"),
        s if s == STATUSES[2] => Some("preview"),
        s if s == STATUSES[3] => Some("research"),
        _ => None,
    }
}

/// A system description: every field present, in [`FIELDS`] order.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemDesc {
    fields: Map<String, Value>,
}

impl Default for SystemDesc {
    fn default() -> Self {
        let mut fields = Map::new();
        for f in FIELDS {
            fields.insert(f.to_string(), Value::String(String::new()));
        }
        SystemDesc { fields }
    }
}

impl SystemDesc {
    /// A field's text ("" when empty or a table).
    pub fn get(&self, field: &str) -> &str {
        self.fields.get(field).and_then(Value::as_str).unwrap_or("")
    }

    /// A field's JSON value.
    pub fn value(&self, field: &str) -> Option<&Value> {
        self.fields.get(field)
    }

    /// Set a known field to text. Unknown fields are an error naming the allowed ones.
    pub fn set(&mut self, field: &str, text: impl Into<String>) -> Result<()> {
        check_field_name(field)?;
        self.fields
            .insert(field.to_string(), Value::String(text.into()));
        Ok(())
    }

    /// Set a known field to any JSON value (the software table); unknown fields are refused.
    pub fn set_value(&mut self, field: &str, value: Value) {
        if FIELDS.contains(&field) {
            self.fields.insert(field.to_string(), value);
        }
    }

    /// Set only if the field is still empty (detection never overrides user input).
    pub fn set_if_empty(&mut self, field: &str, text: impl Into<String>) {
        if self.get(field).is_empty() && !matches!(self.fields.get(field), Some(Value::Object(_))) {
            let _ = self.set(field, text);
        }
    }

    /// Fields that are still empty.
    pub fn empty_fields(&self) -> Vec<&'static str> {
        FIELDS
            .iter()
            .copied()
            .filter(|f| match self.fields.get(*f) {
                Some(Value::String(s)) => s.is_empty(),
                Some(Value::Object(m)) => m.is_empty(),
                _ => true,
            })
            .collect()
    }

    /// Apply a user TOML file (see [`SystemDesc::apply_toml_str`]); errors name the file.
    pub fn apply_toml_file(&mut self, path: &Path) -> Result<()> {
        let text = crate::util::tree::read_text_file(path, "system config (TOML)")
            .context("--system-config")?;
        self.apply_toml_str(&text)
            .with_context(|| format!("in system config {}", path.display()))
    }

    /// Override fields from TOML text: flat `field = "text"` (integers allowed for counts),
    /// `other_software_stack` may be a table of strings. `status` takes short forms.
    pub fn apply_toml_str(&mut self, text: &str) -> Result<()> {
        let table: toml::Table =
            toml::from_str(text).map_err(|e| anyhow::anyhow!("invalid TOML: {e}"))?;
        for (key, value) in table {
            check_field_name(&key)?;
            let json = match value {
                toml::Value::String(s) => Value::String(s),
                toml::Value::Integer(i) => Value::String(i.to_string()),
                toml::Value::Float(f) => Value::String(f.to_string()),
                toml::Value::Table(t) if key == TABLE_FIELD => {
                    let mut m = Map::new();
                    for (k, v) in t {
                        let text = match v {
                            toml::Value::String(s) => s,
                            toml::Value::Integer(i) => i.to_string(),
                            toml::Value::Float(f) => f.to_string(),
                            other => bail!("{key}.{k}: expected text, found {}", other.type_str()),
                        };
                        m.insert(k, Value::String(text));
                    }
                    Value::Object(m)
                }
                other => bail!(
                    "{key}: expected text{}, found {}",
                    if key == TABLE_FIELD {
                        " or a table"
                    } else {
                        ""
                    },
                    other.type_str()
                ),
            };
            let json = match (key.as_str(), json) {
                (k, Value::String(s))
                    if INTEGER_FIELDS.contains(&k)
                        && !s.trim().is_empty()
                        && s.trim().parse::<u64>().is_err() =>
                {
                    bail!(
                        "{k} = {s:?}: must be a whole number, 0 or more (the result summarizer \
                         reads it with int()), e.g. {k} = 1"
                    )
                }
                ("status", Value::String(s)) => Value::String(normalize_status(&s)?.to_string()),
                ("division", Value::String(s)) => {
                    Value::String(normalize_division(&s)?.to_string())
                }
                (_, v) => v,
            };
            self.fields.insert(key, json);
        }
        Ok(())
    }

    /// Read a system description JSON (as `sysinfo --json`, `package` and run sets write it).
    /// Unknown keys are refused, numbers are kept as text, absent fields stay empty.
    pub fn from_json_str(text: &str) -> Result<SystemDesc> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| anyhow::anyhow!("invalid JSON: {e}"))?;
        let Value::Object(map) = value else {
            bail!("expected a JSON object of system description fields");
        };
        let mut desc = SystemDesc::default();
        for (key, v) in map {
            check_field_name(&key)?;
            let v = match v {
                Value::String(_) => v,
                Value::Number(n) => Value::String(n.to_string()),
                Value::Object(_) if key == TABLE_FIELD => v,
                other => bail!("{key}: expected text, found {other}"),
            };
            desc.fields.insert(key, v);
        }
        Ok(desc)
    }

    /// Problems that make the description unfit for a submission (the reasons the official
    /// checkers give, or would crash on). Empty: fit.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !STATUSES.contains(&self.get("status")) {
            out.push(format!(
                "status '{}' is not one of \"{}\" (ruleset >= 4.0); set status = onprem|cloud|preview|rdi",
                self.get("status"),
                STATUSES.join("\", \"")
            ));
        }
        if normalize_division(self.get("division")).is_err() {
            out.push(format!(
                "division '{}' must be closed or open",
                self.get("division")
            ));
        }
        for f in ["submitter", "system_name"] {
            if self.get(f).is_empty() {
                out.push(format!("{f} is empty"));
            }
        }
        for f in INTEGER_FIELDS {
            if self.get(f).trim().is_empty() {
                out.push(format!(
                    "{f} is missing: it must be an integer (checkers parse it with int())"
                ));
            } else if self.get(f).trim().parse::<u64>().is_err() {
                out.push(format!(
                    "{f} '{}' must be an integer (checkers parse it with int())",
                    self.get(f)
                ));
            }
        }
        for f in FIELDS {
            if f != TABLE_FIELD && !matches!(self.fields.get(f), Some(Value::String(_))) {
                out.push(format!("{f} must be text"));
            }
        }
        out
    }

    /// The JSON object, fields in checker order.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        for f in FIELDS {
            m.insert(
                f.to_string(),
                self.fields
                    .get(f)
                    .cloned()
                    .unwrap_or(Value::String(String::new())),
            );
        }
        Value::Object(m)
    }

    /// Pretty JSON text with a final newline.
    pub fn to_json_string(&self) -> String {
        let mut s = serde_json::to_string_pretty(&self.to_json()).expect("JSON of strings");
        s.push('\n');
        s
    }
}

/// `closed` or `open` (case-insensitive input).
pub fn normalize_division(input: &str) -> Result<&'static str> {
    match input.trim().to_ascii_lowercase().as_str() {
        "closed" => Ok("closed"),
        "open" => Ok("open"),
        _ => bail!("invalid division '{input}': use closed or open"),
    }
}

fn check_field_name(field: &str) -> Result<()> {
    if FIELDS.contains(&field) {
        return Ok(());
    }
    let hint = match crate::util::suggest::closest(field, FIELDS) {
        Some(near) => format!(" (did you mean '{near}'?)"),
        None if field == "system" => " (a system TOML holds the keys at its top level, without \
                                        a [system] table: that table is a run config's)"
            .to_string(),
        None => String::new(),
    };
    bail!(
        "unknown system description key '{field}'{hint}; allowed keys: {}",
        FIELDS.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_short_forms_map_to_exact_strings() {
        assert_eq!(normalize_status("onprem").unwrap(), "Available on-premise");
        assert_eq!(normalize_status("Cloud").unwrap(), "Available cloud");
        assert_eq!(normalize_status("preview").unwrap(), "Preview");
        assert_eq!(
            normalize_status("rdi").unwrap(),
            "Research, Development, or Internal (RDI)"
        );
        assert_eq!(
            normalize_status("Available on-premise").unwrap(),
            "Available on-premise"
        );
        let err = normalize_status("available").unwrap_err().to_string();
        assert!(
            err.contains("'available'") && err.contains("onprem"),
            "{err}"
        );
    }

    #[test]
    fn toml_overrides_and_types() {
        let mut d = SystemDesc::default();
        d.apply_toml_str(
            "submitter = \"Org\"\nstatus = \"cloud\"\naccelerators_per_node = 8\n\
             accelerator_on-chip_memories = \"50 MB L2\"\n[other_software_stack]\ncuda = \"13.0\"\n",
        )
        .unwrap();
        assert_eq!(d.get("accelerators_per_node"), "8");
        assert_eq!(d.get("status"), "Available cloud");
        assert_eq!(d.get("accelerator_on-chip_memories"), "50 MB L2");
        assert_eq!(d.value("other_software_stack").unwrap()["cuda"], "13.0");
        let json = d.to_json();
        let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 33);
        assert_eq!(keys[0], "submitter");
        assert_eq!(keys[32], "sw_notes");
    }

    #[test]
    fn unknown_key_names_key_and_allowed_ones() {
        let err = SystemDesc::default()
            .apply_toml_str("gpu_count = 8\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("'gpu_count'") && err.contains("accelerators_per_node"),
            "{err}"
        );
        let err = SystemDesc::default()
            .apply_toml_str("cooling = [1]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cooling"), "{err}");
    }

    #[test]
    fn json_round_trip_and_refusals() {
        let mut d = SystemDesc::default();
        d.apply_toml_str("submitter = \"O\"\naccelerators_per_node = 2\n[other_software_stack]\ncuda = \"13.0\"\n")
            .unwrap();
        let back = SystemDesc::from_json_str(&d.to_json_string()).unwrap();
        assert_eq!(back, d);
        let n = SystemDesc::from_json_str("{\"accelerators_per_node\": 4}").unwrap();
        assert_eq!(n.get("accelerators_per_node"), "4");
        let err = SystemDesc::from_json_str("{\"gpus\": \"4\"}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("'gpus'"), "{err}");
        assert!(SystemDesc::from_json_str("[1]").is_err());
        assert!(SystemDesc::from_json_str("{\"cooling\": [1]}").is_err());
    }

    #[test]
    fn problems_name_bad_fields() {
        let mut d = SystemDesc::default();
        d.apply_toml_str("submitter = \"O\"\nsystem_name = \"s\"\ndivision = \"open\"\nstatus = \"rdi\"\nnumber_of_nodes = 1\nhost_processors_per_node = 2\n").unwrap();
        let p = d.problems();
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("accelerators_per_node"));
        d.set("accelerators_per_node", "8").unwrap();
        assert!(d.problems().is_empty());
        d.set("status", "onprem").unwrap();
        assert!(d.problems()[0].contains("status 'onprem'"));
    }
}
