//! This machine's free memory as the kernel reckons it (`MemAvailable` of /proc/meminfo: what
//! can be allocated without swapping), for refusing a run that certainly cannot fit before it
//! starts, where the kernel's OOM killer would end it without a word.

/// `MemAvailable` of /proc/meminfo, in bytes; None where it cannot be read (not Linux, or a
/// kernel before 3.14).
pub fn available_bytes() -> Option<u64> {
    parse_available(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// `MemAvailable` of the text of /proc/meminfo, in bytes.
pub fn parse_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       24683772 kB\nMemFree:        13977176 kB\n\
                    MemAvailable:   23022168 kB\nBuffers: 1 kB\n";
        assert_eq!(parse_available(text), Some(23022168 * 1024));
        assert_eq!(parse_available("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_available("MemAvailable: lots kB\n"), None);
    }
}
