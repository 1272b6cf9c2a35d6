//! Reads MLPerf logs as the official checkers do: bytes decoded as Latin-1, text before the
//! last `:::MLLOG ` on a line ignored, lines without it skipped. Unlike the official parser it
//! never crashes: malformed lines become [`ParseIssue`]s naming the line.

use super::{Event, EventType, PREFIX};
use serde_json::{Map, Value};
use std::fmt;
use std::path::{Path, PathBuf};

/// A line that carries `:::MLLOG` but cannot be read as an event.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseIssue {
    /// 1-based line number.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// A parsed log: its events in file order and the lines that failed to parse.
#[derive(Debug, Clone, Default)]
pub struct LogFile {
    pub path: PathBuf,
    pub events: Vec<Event>,
    pub issues: Vec<ParseIssue>,
    /// Lines in the file (including non-MLLOG lines).
    pub total_lines: usize,
    /// True when the data looked binary (NUL bytes): a clear hint for the user.
    pub looks_binary: bool,
    /// True when the file holds anything but whitespace (a file of one line of other text is
    /// not empty).
    pub has_text: bool,
}

impl LogFile {
    /// All events with `key`, in file order.
    pub fn with_key<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a Event> + 'a {
        self.events.iter().filter(move |e| e.key == key)
    }

    /// The first event with `key`.
    pub fn first(&self, key: &str) -> Option<&Event> {
        self.events.iter().find(|e| e.key == key)
    }

    /// The last event with `key`.
    pub fn last(&self, key: &str) -> Option<&Event> {
        self.events.iter().rev().find(|e| e.key == key)
    }

    /// `path:line` for messages.
    pub fn at(&self, line: usize) -> String {
        format!("{}:{}", self.path.display(), line)
    }
}

/// The longest line read into memory (an MLLOG line is a few hundred bytes): a longer line is
/// scanned, not kept; when it carries `:::MLLOG` it becomes a [`ParseIssue`].
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// The most `:::MLLOG` text a log file may hold (a run's log holds well under 1 MiB of it): past
/// this, [`parse_file`] refuses the file rather than hold its events in memory. Other text (a
/// run's own output) does not count: [`parse_file`] streams it, so a log of any size is read in
/// bounded memory.
pub const MAX_MLLOG_BYTES: u64 = 64 << 20;

/// Read and parse a log file, streaming it (bounded memory, whatever its size: see
/// [`MAX_LINE_BYTES`], [`MAX_MLLOG_BYTES`]). Only a regular file is read (a FIFO is refused,
/// not waited on); errors name the path and what to do.
pub fn parse_file(path: &Path) -> anyhow::Result<LogFile> {
    let (mut file, len) = crate::util::tree::open_regular(path)?;
    let mut parser = Parser::default();
    let mut pos = 0u64;
    // Holes of a sparse file (a crashed writer's NUL blocks) are NUL bytes, counted rather
    // than read; file systems without SEEK_DATA report the whole file as data.
    while pos < len {
        let Some((data, hole)) = next_data(&file, pos, len) else {
            break;
        };
        parser.feed_zeros(data - pos);
        read_span(&mut file, path, data, Some(hole - data), &mut parser)?;
        pos = hole;
    }
    parser.feed_zeros(len.saturating_sub(pos));
    // anything written after the open is read too
    read_span(&mut file, path, len.max(pos), None, &mut parser)?;
    let mut log = parser.finish();
    log.path = path.to_path_buf();
    Ok(log)
}

/// The next data span of `file` at or after `pos`: (start, end), or None when none (the rest
/// is a hole, or the file system cannot tell: then the caller reads the rest as it is).
fn next_data(file: &std::fs::File, pos: u64, len: u64) -> Option<(u64, u64)> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let data = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
    if data < 0 {
        return None;
    }
    let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
    let hole = if hole < data { len } else { hole as u64 };
    Some((data as u64, hole.min(len).max(data as u64)))
}

/// Feed `parser` from `file` at `start`, `len` bytes (None: to the end of the file).
fn read_span(
    file: &mut std::fs::File,
    path: &Path,
    start: u64,
    len: Option<u64>,
    parser: &mut Parser,
) -> anyhow::Result<()> {
    use std::io::{Read, Seek};
    let io = |e: std::io::Error| crate::util::tree::io_error(path, &e);
    file.seek(std::io::SeekFrom::Start(start)).map_err(io)?;
    let mut left = len.unwrap_or(u64::MAX);
    let mut buf = vec![0u8; 1 << 16];
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = file.read(&mut buf[..want]).map_err(io)?;
        if n == 0 {
            break;
        }
        parser.feed(&buf[..n]);
        left -= n as u64;
        if parser.mllog_bytes > MAX_MLLOG_BYTES {
            anyhow::bail!(
                "{}: more than {} of :::MLLOG lines by line {}: an MLPerf result log is one run's \
                 log, well under 1 MiB of them; is it several runs' logs joined, or the wrong \
                 file? Split it into one result_<i>.txt per run",
                path.display(),
                crate::util::tree::human_size(MAX_MLLOG_BYTES),
                parser.idx + 1
            );
        }
    }
    Ok(())
}

/// Parse log text (already decoded).
pub fn parse_str(text: &str) -> LogFile {
    let mut log = LogFile {
        looks_binary: text.contains('\0'),
        has_text: !text.trim().is_empty(),
        ..LogFile::default()
    };
    for (idx, raw) in text.split('\n').enumerate() {
        log.total_lines = idx + 1;
        parse_line(raw, idx + 1, &mut log);
    }
    log
}

/// Parse raw bytes, decoded as Latin-1 like `mlp_parser.parse_file` (lines over
/// [`MAX_LINE_BYTES`] are scanned, not kept, as [`parse_file`] does).
pub fn parse_bytes(bytes: &[u8]) -> LogFile {
    let mut parser = Parser::default();
    parser.feed(bytes);
    parser.finish()
}

/// The streaming parser: bytes in, whole lines parsed as they end.
#[derive(Default)]
struct Parser {
    log: LogFile,
    /// The current line so far (at most [`MAX_LINE_BYTES`]).
    line: Vec<u8>,
    /// Bytes of the current line when it is over [`MAX_LINE_BYTES`] (0: it is not).
    overlong: u64,
    /// The overlong line carries `:::MLLOG` (searched across chunk ends through `tail`).
    overlong_mllog: bool,
    tail: Vec<u8>,
    /// 0-based index of the current line.
    idx: usize,
    /// Bytes of the `:::MLLOG` lines kept so far.
    mllog_bytes: u64,
}

fn has_prefix(bytes: &[u8]) -> bool {
    memchr::memmem::find(bytes, PREFIX.as_bytes()).is_some()
}

impl Parser {
    fn feed(&mut self, mut bytes: &[u8]) {
        if bytes.contains(&0) {
            self.log.looks_binary = true;
        }
        if !self.log.has_text {
            self.log.has_text = bytes.iter().any(|b| !b.is_ascii_whitespace());
        }
        loop {
            let (part, end) = match memchr::memchr(b'\n', bytes) {
                Some(i) => (&bytes[..i], true),
                None => (bytes, false),
            };
            self.extend(part);
            if !end {
                return;
            }
            self.end_line();
            bytes = &bytes[part.len() + 1..];
        }
    }

    /// `n` NUL bytes (a hole of a sparse file): the line goes on, the file looks binary; past
    /// [`MAX_LINE_BYTES`] they are counted, not copied.
    fn feed_zeros(&mut self, mut n: u64) {
        if n == 0 {
            return;
        }
        self.log.looks_binary = true;
        self.log.has_text = true;
        const ZEROS: [u8; 4096] = [0; 4096];
        while n > 0 && self.overlong == 0 {
            let k = n.min(ZEROS.len() as u64);
            self.extend(&ZEROS[..k as usize]);
            n -= k;
        }
        let last = n.min(ZEROS.len() as u64);
        self.overlong += n - last;
        self.extend(&ZEROS[..last as usize]);
    }

    fn extend(&mut self, part: &[u8]) {
        if self.overlong == 0 && self.line.len() + part.len() <= MAX_LINE_BYTES {
            self.line.extend_from_slice(part);
            return;
        }
        if self.overlong == 0 {
            self.overlong = self.line.len() as u64;
            self.overlong_mllog = has_prefix(&self.line);
            self.tail = std::mem::take(&mut self.line);
        }
        self.overlong += part.len() as u64;
        if !self.overlong_mllog {
            let keep = PREFIX.len() - 1;
            let head = &part[..part.len().min(keep)];
            let start = self.tail.len().saturating_sub(keep);
            let mut seam = self.tail[start..].to_vec();
            seam.extend_from_slice(head);
            self.overlong_mllog = has_prefix(&seam) || has_prefix(part);
            let from = part.len().saturating_sub(keep);
            self.tail = if part.len() >= keep {
                part[from..].to_vec()
            } else {
                seam
            };
        }
    }

    fn end_line(&mut self) {
        self.idx += 1;
        self.log.total_lines = self.idx;
        if self.overlong > 0 {
            if self.overlong_mllog {
                self.log.issues.push(ParseIssue {
                    line: self.idx,
                    message: format!(
                        "a line of {} carrying :::MLLOG, over the {} an MLLOG line may be: not read",
                        crate::util::tree::human_size(self.overlong),
                        crate::util::tree::human_size(MAX_LINE_BYTES as u64)
                    ),
                });
            }
            self.overlong = 0;
            self.overlong_mllog = false;
            self.tail.clear();
            return;
        }
        if has_prefix(&self.line) {
            self.mllog_bytes += self.line.len() as u64;
            // Latin-1: every byte is the char of the same code.
            let raw: String = self.line.iter().map(|&b| b as char).collect();
            parse_line(&raw, self.idx, &mut self.log);
        }
        self.line.clear();
    }

    fn finish(mut self) -> LogFile {
        self.end_line();
        self.log
    }
}

/// Parse one line (1-based `line`) into `log`: an event, an issue, or nothing.
fn parse_line(raw: &str, line: usize, log: &mut LogFile) {
    let Some(pos) = raw.rfind(PREFIX) else {
        return;
    };
    let rest = &raw[pos + PREFIX.len()..];
    let body = rest.trim();
    match parse_event(body, line) {
        Ok(event) => log.events.push(event),
        Err(message) => log.issues.push(ParseIssue { line, message }),
    }
}

fn parse_event(body: &str, line: usize) -> Result<Event, String> {
    let value: Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(first) => {
            // Python's json accepts NaN and Infinity; read them as null rather than fail.
            let patched = replace_nonfinite(body);
            serde_json::from_str(&patched).map_err(|_| format!("broken JSON: {first}"))?
        }
    };
    let Value::Object(mut obj) = value else {
        return Err("the text after :::MLLOG is not a JSON object".into());
    };
    let mut take = |name: &str| {
        obj.remove(name)
            .ok_or_else(|| format!("missing field '{name}'"))
    };
    let namespace = take("namespace").ok();
    let time_ms = take("time_ms")?;
    let event_type = take("event_type")?;
    let key = take("key")?;
    let value = take("value")?;
    let metadata = take("metadata")?;
    let time_ms = match &time_ms {
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| format!("time_ms is not a number: {s:?}"))?,
        other => return Err(format!("time_ms is not a number: {other}")),
    };
    let event_type = event_type
        .as_str()
        .and_then(EventType::parse)
        .ok_or_else(|| format!("unknown event_type {event_type}"))?;
    let key = match key {
        Value::String(s) => s,
        other => return Err(format!("key is not a string: {other}")),
    };
    let metadata = match metadata {
        Value::Object(m) => m,
        Value::Null => Map::new(),
        other => return Err(format!("metadata is not an object: {other}")),
    };
    let namespace = match namespace {
        Some(Value::String(s)) => s,
        _ => String::new(),
    };
    Ok(Event {
        namespace,
        time_ms,
        event_type,
        key,
        value,
        metadata,
        line,
    })
}

/// Replace bare NaN/Infinity/-Infinity tokens (outside strings) with null.
fn replace_nonfinite(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_str = false;
    let mut escaped = false;
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if c == '"' {
            in_str = true;
        }
        let mut replaced = false;
        for tok in ["-Infinity", "Infinity", "NaN"] {
            if rest.starts_with(tok) {
                out.push_str("null");
                rest = &rest[tok.len()..];
                replaced = true;
                break;
            }
        }
        if !replaced {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_prefix_text_and_reports_broken_lines() {
        let text = "noise\n[1,0]<stdout>: :::MLLOG {\"namespace\": \"\", \"time_ms\": 5, \"event_type\": \"POINT_IN_TIME\", \"key\": \"seed\", \"value\": 7, \"metadata\": {\"file\": \"a.py\", \"lineno\": 3}}\n:::MLLOG {\"namespace\": \n";
        let log = parse_str(text);
        assert_eq!(log.events.len(), 1);
        assert_eq!(log.events[0].key, "seed");
        assert_eq!(log.events[0].line, 2);
        assert_eq!(log.issues.len(), 1);
        assert_eq!(log.issues[0].line, 3);
    }

    #[test]
    fn missing_value_is_an_issue_not_a_panic() {
        let log = parse_str(":::MLLOG {\"namespace\": \"\", \"time_ms\": 5, \"event_type\": \"POINT_IN_TIME\", \"key\": \"seed\", \"metadata\": {}}");
        assert!(log.events.is_empty());
        assert!(log.issues[0].message.contains("value"));
    }

    #[test]
    fn streaming_matches_whole_text_and_skips_overlong_lines() {
        let ev = ":::MLLOG {\"namespace\": \"\", \"time_ms\": 5, \"event_type\": \"POINT_IN_TIME\", \"key\": \"seed\", \"value\": 7, \"metadata\": {}}";
        let text = format!("a\n{ev}\nb\n{ev}\n");
        let whole = parse_str(&text);
        let mut p = Parser::default();
        for chunk in text.as_bytes().chunks(3) {
            p.feed(chunk);
        }
        let streamed = p.finish();
        assert_eq!(streamed.events, whole.events);
        assert_eq!(streamed.total_lines, whole.total_lines);
        // an overlong line: skipped, or an issue when it carries the prefix across chunk ends
        let long = "x".repeat(MAX_LINE_BYTES + 5);
        for (line, issue) in [(long.clone(), false), (format!("{long}{ev}"), true)] {
            let text = format!("{ev}\n{line}\n{ev}");
            let mut p = Parser::default();
            for chunk in text.as_bytes().chunks(4096 + 3) {
                p.feed(chunk);
            }
            let log = p.finish();
            assert_eq!(log.events.len(), 2);
            assert_eq!(log.total_lines, 3);
            assert_eq!(log.issues.len(), usize::from(issue), "{:?}", log.issues);
            if issue {
                assert_eq!(log.issues[0].line, 2);
                assert!(log.issues[0].message.contains("over the 1.0 MiB"));
            }
        }
    }

    #[test]
    fn nan_values_parse() {
        let log = parse_str(":::MLLOG {\"namespace\": \"\", \"time_ms\": 5, \"event_type\": \"POINT_IN_TIME\", \"key\": \"eval_accuracy\", \"value\": NaN, \"metadata\": {\"note\": \"NaN\"}}");
        assert_eq!(log.events.len(), 1);
        assert_eq!(log.events[0].value, Value::Null);
        assert_eq!(log.events[0].meta("note").unwrap(), "NaN");
    }
}
