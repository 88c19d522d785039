//! Following a kept call until it settles (`call --wait`, `tasks show
//! --follow`): a progress line with its status, message and elapsed time;
//! its questions, asked on a terminal (and answered) or printed with the
//! command that answers them; and a gateway that goes away meanwhile (a
//! restart): the follower says so, reconnects with a bounded backoff and
//! follows the same call.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use mcptask_core::policy::Backoff;
use serde_json::{Value, json};

use super::client::{ApiFailure, GatewayClient, Unreachable};
use super::outcome::{outcome_code, print_outcome, shown_status, terminal};
use super::output::outln;
use super::progress::{Progress, Show, TICK};
use super::{answers, exit, inputs, prompt};

/// Retry delays while the gateway does not answer: soon after a restart,
/// never more than a few seconds apart.
const RECONNECT_BACKOFF: Backoff = Backoff {
    base_ms: 250,
    max_ms: 5_000,
};

/// How long a follower keeps reconnecting before it gives up (the call
/// goes on in the gateway, and it says how to follow it again).
const RECONNECT_FOR: Duration = Duration::from_secs(300);

/// Follow call `id` until it settles, `timeout` passes or Ctrl-C; the exit
/// code. `json`: no progress line, and the settled call's detail as the
/// gateway returns it on standard output.
pub async fn follow(
    gw: &GatewayClient,
    id: &str,
    timeout: Option<Duration>,
    json: bool,
) -> anyhow::Result<i32> {
    let progress = Progress::new(if json { Show::Never } else { Show::Always });
    wait_or_stop(
        id,
        timeout,
        &progress,
        until_settled(gw, id, json, &progress),
    )
    .await
}

/// Wait for `settled` (the exit code of a settled call) unless `timeout`
/// passes or Ctrl-C comes first: those only stop the waiting, and say so,
/// since the call goes on in the gateway.
async fn wait_or_stop(
    id: &str,
    timeout: Option<Duration>,
    progress: &Progress,
    settled: impl std::future::Future<Output = anyhow::Result<i32>>,
) -> anyhow::Result<i32> {
    let stopped = |why: String| {
        progress.clear();
        prompt::end_prompt_line();
        eprintln!("{why}: stopped waiting; {}", goes_on(id));
    };
    let until = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        settled = settled => settled,
        _ = until => {
            stopped(format!("--timeout {}s reached", timeout.unwrap_or_default().as_secs()));
            Ok(exit::WAIT_TIMED_OUT)
        }
        _ = tokio::signal::ctrl_c() => {
            stopped("interrupted".to_string());
            Ok(exit::INTERRUPTED)
        }
    }
}

/// What a user who stops waiting needs: the call is not lost, and how to
/// get back to it.
fn goes_on(id: &str) -> String {
    format!(
        "task {id} goes on in the gateway\n  follow it again: mcptask tasks show {id} --follow\n  or cancel it:    mcptask tasks cancel {id}"
    )
}

/// Whether a failed request may succeed if sent again: the gateway was not
/// reached, or answered that it is busy or stopping (503).
fn transient(e: &anyhow::Error) -> bool {
    Unreachable::is(e)
        || e.downcast_ref::<ApiFailure>()
            .is_some_and(|f| f.status == 503)
}

async fn until_settled(
    gw: &GatewayClient,
    id: &str,
    json: bool,
    progress: &Progress,
) -> anyhow::Result<i32> {
    let started = Instant::now();
    let mut questions = Questions {
        gw,
        id,
        interactive: prompt::interactive(),
        done: BTreeSet::new(),
    };
    let mut reconnect = Reconnect::default();
    loop {
        let task = match gw.get(&format!("/api/v1/tasks/{id}")).await {
            Ok(task) => task,
            Err(e) if transient(&e) => {
                reconnect.failed(gw, id, &e, progress).await?;
                continue;
            }
            Err(e) => return Err(e),
        };
        reconnect.succeeded(id, progress);
        let status = task["status"].as_str().unwrap_or("?");
        if terminal(status) {
            progress.clear();
            if json {
                outln!("{}", serde_json::to_string_pretty(&task)?);
                return Ok(outcome_code(&task));
            }
            eprintln!(
                "{} after {:.1}s",
                shown_status(&task),
                started.elapsed().as_secs_f64()
            );
            return Ok(print_outcome(&task));
        }
        questions.take_up(&task, progress).await?;
        let message = task["statusMessage"]
            .as_str()
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        let retry = task["lastError"]
            .as_str()
            .map(|e| format!(" (retrying: {e})"))
            .unwrap_or_default();
        progress.tick(&format!("{status}{message}{retry}"), started.elapsed());
        tokio::time::sleep(TICK).await;
    }
}

/// The follower's side of a gateway that does not answer.
#[derive(Default)]
struct Reconnect {
    /// Since when it has not answered.
    since: Option<Instant>,
    failures: i64,
}

impl Reconnect {
    /// The gateway did not answer (`e`): say so the first time, then wait
    /// before the next try; give up after [`RECONNECT_FOR`].
    async fn failed(
        &mut self,
        gw: &GatewayClient,
        id: &str,
        e: &anyhow::Error,
        progress: &Progress,
    ) -> anyhow::Result<()> {
        let since = *self.since.get_or_insert_with(|| {
            progress.clear();
            let why = e.to_string();
            eprintln!(
                "lost the gateway: {}\n  reconnecting to follow task {id} (the call goes on in the gateway)",
                why.lines().next().unwrap_or_default()
            );
            Instant::now()
        });
        if since.elapsed() >= RECONNECT_FOR {
            progress.clear();
            anyhow::bail!(
                "the gateway at {} has not answered for {}s: stopped waiting; {}",
                gw.base(),
                RECONNECT_FOR.as_secs(),
                goes_on(id)
            );
        }
        let delay = Duration::from_millis(RECONNECT_BACKOFF.delay_ms(self.failures) as u64);
        self.failures += 1;
        let until = Instant::now() + delay;
        while Instant::now() < until {
            progress.tick(
                &format!("reconnecting to {} (try {})", gw.base(), self.failures),
                since.elapsed(),
            );
            tokio::time::sleep(TICK.min(until - Instant::now())).await;
        }
        Ok(())
    }

    /// The gateway answered: if it had not, say that it is back.
    fn succeeded(&mut self, id: &str, progress: &Progress) {
        if let Some(since) = self.since.take() {
            progress.clear();
            eprintln!(
                "reconnected after {:.1}s; following task {id} again",
                since.elapsed().as_secs_f64()
            );
            self.failures = 0;
        }
    }
}

/// The questions of the followed call, each taken up once.
struct Questions<'a> {
    gw: &'a GatewayClient,
    id: &'a str,
    /// Asked at the terminal (otherwise printed with their answer commands).
    interactive: bool,
    /// Keys answered, printed, or no longer asked.
    done: BTreeSet<String>,
}

impl Questions<'_> {
    /// Take up each open question of `task` not taken up yet: on a
    /// terminal, ask a form and send the answer; otherwise (or for a
    /// question that is no form) print it and how to answer it.
    async fn take_up(&mut self, task: &Value, progress: &Progress) -> anyhow::Result<()> {
        for (key, request) in task["inputRequests"].as_object().into_iter().flatten() {
            if self.done.contains(key) {
                continue;
            }
            progress.clear();
            match prompt::form_of(request).filter(|_| self.interactive) {
                Some(form) => {
                    if self.ask(key, request, &form).await? {
                        self.done.insert(key.clone());
                    }
                }
                None => {
                    for line in inputs::open_question(self.id, key, request) {
                        eprintln!("{line}");
                    }
                    eprintln!(
                        "  (waiting until it is answered: paste the command in another shell)"
                    );
                    self.done.insert(key.clone());
                }
            }
        }
        Ok(())
    }

    /// Ask question `key` and send the answer: `true` when it needs no more
    /// asking (stored, or answered elsewhere meanwhile), `false` to ask it
    /// again (the gateway refused the answer, or did not get it).
    async fn ask(
        &self,
        key: &str,
        request: &Value,
        form: &mcptask_core::elicit::Form,
    ) -> anyhow::Result<bool> {
        let content = tokio::select! {
            content = prompt::ask(key, request, form) => content?,
            () = self.closes(key) => {
                prompt::end_prompt_line();
                eprintln!("  input {key} is no longer asked (answered elsewhere, or the call moved on)");
                return Ok(true);
            }
        };
        let response = json!({"action": "accept", "content": content});
        match answers::send(self.gw, self.id, key, &response).await {
            Ok(out) if answers::stored(&out) => {
                eprintln!("  answer sent");
                Ok(true)
            }
            Ok(_) => {
                eprintln!("  not stored: input {key} was answered already");
                Ok(true)
            }
            Err(e) if answers::refused(&e).is_some() => {
                eprintln!("  the gateway refused it: {e}");
                Ok(false)
            }
            Err(e) if transient(&e) => {
                let why = e.to_string();
                eprintln!(
                    "  the answer did not reach the gateway ({}); asked again once it answers",
                    why.lines().next().unwrap_or_default()
                );
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Until question `key` is no longer open (answered from elsewhere, or
    /// the call settled); a gateway that does not answer changes nothing.
    async fn closes(&self, key: &str) {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if let Ok(task) = self.gw.get(&format!("/api/v1/tasks/{}", self.id)).await
                && (terminal(task["status"].as_str().unwrap_or(""))
                    || task["inputRequests"].get(key).is_none())
            {
                return;
            }
        }
    }
}
