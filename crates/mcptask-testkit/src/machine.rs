//! What a benchmark prints about the machine it ran on (Linux `/proc`), so
//! figures are read with their conditions. Shared by the benchmarks of every
//! crate, so that all figures describe their machine the same way.

use std::path::Path;

/// Cores this process may use.
pub fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A small text file, trimmed (`None` if unreadable).
pub fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The 1/5/15-minute load averages.
pub fn load_average() -> String {
    read_trimmed("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into())
}

/// The CPU model name.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Total memory, in GiB.
pub fn mem_total() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let kb: u64 = info
                .lines()
                .find(|l| l.starts_with("MemTotal:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some(format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0))
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The filesystem holding `path` (longest matching mount point): on tmpfs a
/// "durable" commit would be free.
pub fn filesystem_of(path: &Path) -> String {
    let path = path
        .parent()
        .and_then(|p| p.canonicalize().ok())
        .unwrap_or_default();
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return "unknown filesystem".into();
    };
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (device, mount, fstype) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(mount)
                .then(|| (mount.len(), format!("{fstype} ({device} at {mount})")))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "unknown filesystem".into(), |(_, fs)| fs)
}
