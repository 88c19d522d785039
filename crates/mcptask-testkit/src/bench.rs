//! What benchmarks share: the smoke-run switch and knobs from the
//! environment, callers driven for a count or a time, latency percentiles,
//! the process's memory, and the PostgreSQL client tools.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::in_ci;
use crate::rng::Rng;

/// `MCPTASK_BENCH_QUICK` set (and not `0`): the smoke run of the test command.
pub fn quick() -> bool {
    std::env::var("MCPTASK_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// An unsigned number from the environment, if set.
pub fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Operations and their latencies, over a wall time.
pub struct Run {
    pub ops: usize,
    pub elapsed: Duration,
    pub latencies: Vec<Duration>,
}

impl Run {
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    pub fn p(&self, q: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        percentile(&sorted, q)
    }

    /// "p50 x ms, p99 y ms".
    pub fn latency_text(&self) -> String {
        format!(
            "p50 {:.3} ms, p99 {:.3} ms",
            ms(self.p(0.50)),
            ms(self.p(0.99))
        )
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// `total` operations spread over `concurrency` callers; each caller runs its
/// share one after another, like a client that waits for each answer. Returns
/// what each operation returned, and the timing.
pub async fn run_count<F, Fut, T>(total: usize, concurrency: usize, op: F) -> (Vec<T>, Run)
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let start = Instant::now();
    let callers: Vec<_> = (0..concurrency)
        .map(|caller| {
            let op = op.clone();
            let share = total / concurrency + usize::from(caller < total % concurrency);
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(share);
                let mut latencies = Vec::with_capacity(share);
                for i in 0..share {
                    let t = Instant::now();
                    out.push(op(caller * share + i).await);
                    latencies.push(t.elapsed());
                }
                (out, latencies)
            })
        })
        .collect();
    let mut out = Vec::with_capacity(total);
    let mut latencies = Vec::with_capacity(total);
    for caller in callers {
        let (o, l) = caller.await.expect("a caller panicked");
        out.extend(o);
        latencies.extend(l);
    }
    let run = Run {
        ops: out.len(),
        elapsed: start.elapsed(),
        latencies,
    };
    (out, run)
}

/// `concurrency` callers each running `op` on random picks from `ids` until
/// `budget` has passed. Caller `c` draws from the seed `c + 1`, so two sides
/// given the same ids see the same picks in the same order.
pub async fn run_for<F, Fut>(
    ids: &Arc<Vec<Arc<str>>>,
    concurrency: usize,
    budget: Duration,
    op: F,
) -> Run
where
    F: Fn(Arc<str>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let start = Instant::now();
    let callers: Vec<_> = (0..concurrency)
        .map(|caller| {
            let op = op.clone();
            let ids = ids.clone();
            tokio::spawn(async move {
                let mut rng = Rng(caller as u64 + 1);
                let mut latencies = Vec::new();
                while start.elapsed() < budget {
                    let t = Instant::now();
                    op(ids[rng.below(ids.len())].clone()).await;
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for caller in callers {
        latencies.extend(caller.await.expect("a caller panicked"));
    }
    Run {
        ops: latencies.len(),
        elapsed: start.elapsed(),
        latencies,
    }
}

/// Resident memory of this process, in KiB (`VmRSS`), if the kernel says.
pub fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// A PostgreSQL client program (`pgbench`, `psql`): from `PATH`, else the
/// newest `/usr/lib/postgresql/<version>/bin`. Missing, the caller's part is
/// skipped loudly, except under CI, where it is an error.
pub fn pg_tool(name: &str, part: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    let installed = || {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin").join(name))
            .filter(|p| p.is_file())
            .collect();
        // Versions are numbers: the longest name, then the greatest, is the newest.
        dirs.sort_by_key(|p| (p.as_os_str().len(), p.clone()));
        dirs.pop()
    };
    match on_path.or_else(installed) {
        Some(bin) => Some(bin),
        None if in_ci() => panic!("{part} needs {name} under CI; install the PostgreSQL client"),
        None => {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED ({part}: no {name}): install the PostgreSQL client programs"
            );
            None
        }
    }
}
