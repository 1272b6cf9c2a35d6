//! Host detection for the system description: CPU (/proc/cpuinfo and sysfs), memory
//! (/proc/meminfo), storage (/sys/block), OS (/etc/os-release) and kernel. Everything is read
//! below a root directory so tests can point it at a fake tree; a file that is missing leaves
//! its fields empty (and the caller warns), it is never an error.

use super::system_desc::SystemDesc;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Where to read the host's files from ("/" on a real machine).
#[derive(Debug, Clone)]
pub struct HostRoot(pub PathBuf);

impl Default for HostRoot {
    fn default() -> Self {
        HostRoot(PathBuf::from("/"))
    }
}

impl HostRoot {
    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.0.join(rel)).ok()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

/// What /proc/cpuinfo tells.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuInfo {
    pub model_name: String,
    pub sockets: usize,
    /// Physical cores per socket.
    pub cores_per_socket: usize,
    /// Logical CPUs on the node.
    pub vcpus: usize,
    /// "cpu MHz" of the first processor (current frequency), if given.
    pub mhz: Option<f64>,
}

/// Parse /proc/cpuinfo text (x86 and most others).
pub fn parse_cpuinfo(text: &str) -> CpuInfo {
    let mut info = CpuInfo::default();
    let mut sockets = BTreeSet::new();
    let mut cores = BTreeSet::new();
    let mut cpu_cores_field = None;
    let mut physical_id = String::new();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "processor" => {
                info.vcpus += 1;
                physical_id.clear();
            }
            "model name" | "Model Name" if info.model_name.is_empty() => {
                info.model_name = v.to_string()
            }
            "physical id" => {
                physical_id = v.to_string();
                sockets.insert(v.to_string());
            }
            "core id" => {
                cores.insert((physical_id.clone(), v.to_string()));
            }
            "cpu cores" if cpu_cores_field.is_none() => cpu_cores_field = v.parse::<usize>().ok(),
            "cpu MHz" if info.mhz.is_none() => info.mhz = v.parse::<f64>().ok(),
            _ => {}
        }
    }
    info.sockets = sockets.len().max(1);
    info.cores_per_socket = cpu_cores_field
        .or_else(|| (!cores.is_empty()).then(|| cores.len() / info.sockets))
        .unwrap_or(info.vcpus / info.sockets);
    info
}

/// MemTotal from /proc/meminfo, in bytes.
pub fn parse_meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// PRETTY_NAME (else NAME VERSION) from /etc/os-release.
pub fn parse_os_release(text: &str) -> Option<String> {
    let mut vals = std::collections::HashMap::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once('=') {
            vals.insert(k.trim().to_string(), v.trim().trim_matches('"').to_string());
        }
    }
    if let Some(p) = vals.get("PRETTY_NAME") {
        return Some(p.clone());
    }
    let name = vals.get("NAME")?;
    Some(match vals.get("VERSION") {
        Some(v) => format!("{name} {v}"),
        None => name.clone(),
    })
}

/// Bytes as the submissions write them: "24 GB", "1.92 TB" (decimal units).
pub fn human_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    let (value, unit) = if b >= 1e12 {
        (b / 1e12, "TB")
    } else if b >= 1e9 {
        (b / 1e9, "GB")
    } else {
        (b / 1e6, "MB")
    };
    let text = if value >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    };
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    format!("{text} {unit}")
}

/// Per-instance cache sizes of cpu0 from sysfs: "L1d 32 KiB, L1i 32 KiB, L2 512 KiB, L3 32 MiB".
fn detect_caches(root: &HostRoot) -> Option<String> {
    let dir = root.path("sys/devices/system/cpu/cpu0/cache");
    let mut entries: Vec<(String, String)> = Vec::new();
    for e in std::fs::read_dir(&dir).ok()?.flatten() {
        let p = e.path();
        if !e.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        let read = |f: &str| {
            std::fs::read_to_string(p.join(f))
                .ok()
                .map(|s| s.trim().to_string())
        };
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            continue;
        };
        let suffix = match kind.as_str() {
            "Data" => "d",
            "Instruction" => "i",
            _ => "",
        };
        entries.push((format!("L{level}{suffix}"), size_text(&size)));
    }
    if entries.is_empty() {
        return None;
    }
    entries.sort();
    Some(
        entries
            .iter()
            .map(|(l, s)| format!("{l} {s}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// sysfs cache size ("32K", "32768K", "1M") as "32 KiB" / "32 MiB".
fn size_text(size: &str) -> String {
    let digits: String = size.chars().take_while(|c| c.is_ascii_digit()).collect();
    let Ok(n) = digits.parse::<u64>() else {
        return size.to_string();
    };
    let kib = match size.trim_start_matches(&digits[..]) {
        "K" => n,
        "M" => n * 1024,
        "G" => n * 1024 * 1024,
        _ => return size.to_string(),
    };
    if kib >= 1024 && kib % 1024 == 0 {
        format!("{} MiB", kib / 1024)
    } else {
        format!("{kib} KiB")
    }
}

/// Maximum CPU frequency from cpufreq (kHz), else /proc/cpuinfo's current "cpu MHz".
fn detect_frequency(root: &HostRoot, cpu: &CpuInfo) -> Option<String> {
    if let Some(khz) = root
        .read("sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
        .and_then(|s| s.trim().parse::<f64>().ok())
    {
        return Some(format!("{:.2} GHz", khz / 1e6));
    }
    cpu.mhz.map(|mhz| format!("{mhz:.0} MHz"))
}

/// One block device worth reporting.
#[derive(Debug, Clone, PartialEq)]
pub struct Disk {
    pub name: String,
    pub bytes: u64,
    pub kind: &'static str,
}

/// Whole disks from /sys/block (no loop, ram, zram, device-mapper, md or optical devices).
pub fn detect_disks(root: &HostRoot) -> Vec<Disk> {
    let Ok(dir) = std::fs::read_dir(root.path("sys/block")) else {
        return Vec::new();
    };
    let mut disks = Vec::new();
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if ["loop", "ram", "zram", "dm-", "md", "sr", "fd", "nbd"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            continue;
        }
        let p = e.path();
        let read = |f: &str| {
            std::fs::read_to_string(p.join(f))
                .ok()
                .map(|s| s.trim().to_string())
        };
        let Some(sectors) = read("size").and_then(|s| s.parse::<u64>().ok()) else {
            continue;
        };
        if sectors == 0 {
            continue;
        }
        let kind = if name.starts_with("nvme") {
            "NVMe SSD"
        } else if read("queue/rotational").as_deref() == Some("1") {
            "HDD"
        } else {
            "SSD"
        };
        disks.push(Disk {
            name,
            bytes: sectors * 512,
            kind,
        });
    }
    disks.sort_by(|a, b| a.name.cmp(&b.name));
    disks
}

/// "2x 1.92 TB NVMe SSD + 1x 30 TB HDD": disks grouped by (size, kind).
pub fn storage_capacity_text(disks: &[Disk]) -> String {
    let mut groups: Vec<(String, &str, usize)> = Vec::new();
    for d in disks {
        let size = human_bytes(d.bytes);
        match groups
            .iter_mut()
            .find(|(s, k, _)| *s == size && *k == d.kind)
        {
            Some(g) => g.2 += 1,
            None => groups.push((size, d.kind, 1)),
        }
    }
    groups
        .iter()
        .map(|(s, k, n)| format!("{n}x {s} {k}"))
        .collect::<Vec<_>>()
        .join(" + ")
}

/// Fill the host fields of `desc` that are still empty; returns the fields that could not be
/// detected.
pub fn detect_host(root: &HostRoot, desc: &mut SystemDesc) -> Vec<&'static str> {
    let mut missing = Vec::new();
    desc.set_if_empty("number_of_nodes", "1");
    match root.read("proc/cpuinfo").map(|t| parse_cpuinfo(&t)) {
        Some(cpu) if cpu.vcpus > 0 => {
            if !cpu.model_name.is_empty() {
                desc.set_if_empty("host_processor_model_name", cpu.model_name.clone());
            } else {
                missing.push("host_processor_model_name");
            }
            desc.set_if_empty("host_processors_per_node", cpu.sockets.to_string());
            desc.set_if_empty(
                "host_processor_core_count",
                cpu.cores_per_socket.to_string(),
            );
            desc.set_if_empty("host_processor_vcpu_count", cpu.vcpus.to_string());
            match detect_frequency(root, &cpu) {
                Some(f) => desc.set_if_empty("host_processor_frequency", f),
                None => missing.push("host_processor_frequency"),
            }
        }
        _ => missing.extend([
            "host_processors_per_node",
            "host_processor_model_name",
            "host_processor_core_count",
            "host_processor_vcpu_count",
            "host_processor_frequency",
        ]),
    }
    match detect_caches(root) {
        Some(c) => desc.set_if_empty("host_processor_caches", c),
        None => missing.push("host_processor_caches"),
    }
    match root
        .read("proc/meminfo")
        .and_then(|t| parse_meminfo_total(&t))
    {
        Some(bytes) => desc.set_if_empty("host_memory_capacity", human_bytes(bytes)),
        None => missing.push("host_memory_capacity"),
    }
    let disks = detect_disks(root);
    if disks.is_empty() {
        missing.extend(["host_storage_type", "host_storage_capacity"]);
    } else {
        let kinds: BTreeSet<&str> = disks.iter().map(|d| d.kind).collect();
        desc.set_if_empty(
            "host_storage_type",
            kinds.into_iter().collect::<Vec<_>>().join(", "),
        );
        desc.set_if_empty("host_storage_capacity", storage_capacity_text(&disks));
    }
    match root
        .read("etc/os-release")
        .and_then(|t| parse_os_release(&t))
    {
        Some(os) => desc.set_if_empty("operating_system", os),
        None => missing.push("operating_system"),
    }
    missing
}

/// The running kernel release, if readable.
pub fn kernel_release(root: &HostRoot) -> Option<String> {
    root.read("proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nmodel name\t: AMD EPYC 7742 64-Core Processor\ncpu MHz\t\t: 2245.780\nphysical id\t: 0\ncore id\t\t: 0\ncpu cores\t: 64\n\n\
processor\t: 1\nmodel name\t: AMD EPYC 7742 64-Core Processor\nphysical id\t: 1\ncore id\t\t: 0\ncpu cores\t: 64\n\n\
processor\t: 2\nmodel name\t: AMD EPYC 7742 64-Core Processor\nphysical id\t: 1\ncore id\t\t: 1\ncpu cores\t: 64\n";

    #[test]
    fn cpuinfo_counts_sockets_cores_vcpus() {
        let c = parse_cpuinfo(CPUINFO);
        assert_eq!(c.model_name, "AMD EPYC 7742 64-Core Processor");
        assert_eq!((c.sockets, c.cores_per_socket, c.vcpus), (2, 64, 3));
        assert_eq!(c.mhz, Some(2245.78));
    }

    #[test]
    fn sizes_and_os() {
        assert_eq!(human_bytes(1_920_383_410_176), "1.92 TB");
        assert_eq!(human_bytes(25_276_510_208), "25.28 GB");
        assert_eq!(human_bytes(2_000_000_000_000), "2 TB");
        assert_eq!(size_text("32768K"), "32 MiB");
        assert_eq!(size_text("48K"), "48 KiB");
        assert_eq!(
            parse_os_release("NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n")
                .unwrap(),
            "Debian GNU/Linux 12 (bookworm)"
        );
        assert_eq!(
            parse_meminfo_total("MemTotal:       24684092 kB\n"),
            Some(24684092 * 1024)
        );
        let disks = vec![
            Disk {
                name: "nvme0n1".into(),
                bytes: 1_920_000_000_000,
                kind: "NVMe SSD",
            },
            Disk {
                name: "nvme1n1".into(),
                bytes: 1_920_000_000_000,
                kind: "NVMe SSD",
            },
            Disk {
                name: "sda".into(),
                bytes: 30_000_000_000_000,
                kind: "HDD",
            },
        ];
        assert_eq!(
            storage_capacity_text(&disks),
            "2x 1.92 TB NVMe SSD + 1x 30 TB HDD"
        );
    }
}
