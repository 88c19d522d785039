//! `mcptask call` and `mcptask tasks …`.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::client::GatewayClient;
use super::exit;
use super::outcome::{
    print_outcome, print_result, result_code, shown_status, terminal, tool_error,
};
use super::output::outln;
use super::progress::{Progress, Show};

/// What `mcptask call` asks for.
pub struct CallArgs<'a> {
    pub server: &'a str,
    pub tool: &'a str,
    pub args: &'a str,
    /// `--input KEY=JSON`: answers to input asked before the task starts.
    pub inputs: &'a [String],
    /// `Some(timeout)`: follow the task until it settles.
    pub wait: Option<Option<Duration>>,
    pub json: bool,
    /// `--background` (`Some(true)`) or `--sync` (`Some(false)`).
    pub background: Option<bool>,
}

use mcptask_core::protocol::MAX_INPUT_ROUNDS;

/// `mcptask call SERVER TOOL --args JSON [--input KEY=JSON]… [--wait] [--json]`.
pub async fn call(gw: &GatewayClient, call: CallArgs<'_>) -> anyhow::Result<i32> {
    let CallArgs {
        server,
        tool,
        args,
        wait,
        json: json_out,
        ..
    } = call;
    let arguments: Value =
        serde_json::from_str(args).with_context(|| format!("--args is not valid JSON: {args}"))?;
    if !arguments.is_object() {
        bail!("--args must be a JSON object, e.g. '{{\"seconds\": 5}}'");
    }
    let given = super::pre_task::parse_inputs(call.inputs)?;
    let call_line = format!(
        "mcptask call {server} {tool} --args {}",
        super::inputs::shell_quote(args)
    );
    // A server may ask for input before it starts the task: answer each
    // round (from --input, or at the terminal) and call again with every
    // answer so far, as the gateway relays them to the server.
    let mut responses = std::collections::BTreeMap::new();
    let mut rounds = 0;
    // Waiting keeps the call (unless --sync): it then has an id to print
    // before the wait and to follow again after a gateway restart, and its
    // status shows while it runs, whatever the tool.
    let background = call.background.or(wait.is_some().then_some(true));
    // While the gateway makes the call (a synchronous one runs for as long
    // as the tool does), its elapsed time shows.
    let progress = Progress::new(match (json_out, wait) {
        (true, _) => Show::Never,
        (false, Some(_)) => Show::Always,
        (false, None) => Show::OnTerminal,
    });
    let calling = format!("calling {tool} on {server}");
    let out = loop {
        let mut body = json!({"server": server, "tool": tool, "arguments": arguments});
        if let Some(background) = background {
            body["background"] = json!(background);
        }
        if !responses.is_empty() {
            body["inputResponses"] = json!(responses);
        }
        // Ctrl-C while the gateway makes the call: say what became of it
        // (rather than die silently with 130).
        let posted = tokio::select! {
            posted = gw.post("/api/v1/calls", &body) => posted,
            () = progress.run(&calling, Instant::now()) => unreachable!("progress ticks until dropped"),
            _ = tokio::signal::ctrl_c() => {
                progress.clear();
                eprintln!(
                    "interrupted before the gateway answered: a synchronous call is not kept (its answer is lost, though the server may finish the work); a call the gateway kept as a task goes on there\n  find it:   mcptask tasks list\n  follow it: mcptask tasks show ID --follow"
                );
                return Ok(exit::INTERRUPTED);
            }
        };
        progress.clear();
        let failure = match posted {
            Ok(out) => break out,
            Err(e) => e,
        };
        let Some(needed) = failure
            .downcast_ref::<super::client::ApiFailure>()
            .filter(|f| f.code == "input_needed")
        else {
            return Err(failure);
        };
        let requests = &needed.details["inputRequests"];
        rounds += 1;
        let asked_again = requests
            .as_object()
            .into_iter()
            .flatten()
            .any(|(key, _)| responses.contains_key(key));
        if asked_again || rounds > MAX_INPUT_ROUNDS {
            bail!(
                "{}\n  the server asked again for input it was given; check the answers",
                needed
            );
        }
        match super::pre_task::answer_round(requests, &given, &call_line).await? {
            Some(answers) => responses.extend(answers),
            None => {
                return Err(anyhow::anyhow!(
                    "the server needs input before it starts the task (see above)\n  fix: answer with --input KEY=JSON (run in a terminal to be asked)"
                ));
            }
        }
    };
    if out["outcome"] == "completed" {
        if json_out {
            outln!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            print_result(&out["result"]);
        }
        return Ok(result_code(&out["result"]));
    }
    let id = out["task"]["id"]
        .as_str()
        .context("the gateway returned a task without an id")?
        .to_string();
    let Some(timeout) = wait else {
        if json_out {
            outln!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            outln!("{id}");
        }
        eprintln!("task {id} is tracked; follow it with `mcptask tasks show {id} --follow`");
        return Ok(0);
    };
    // Before the wait: whatever becomes of this process or the gateway,
    // the user can get back to the call.
    eprintln!("task {id} (follow it again: mcptask tasks show {id} --follow)");
    super::follow::follow(gw, &id, timeout, json_out).await
}

/// What `tasks list` asks for.
pub struct ListArgs<'a> {
    pub status: Option<&'a str>,
    /// How the calls ended (`tool_error` apart from `completed`).
    pub outcome: Option<&'a str>,
    pub server: Option<&'a str>,
    pub principal: Option<&'a str>,
    pub active: bool,
    /// Page size.
    pub limit: u32,
    /// Continue after a previous page.
    pub cursor: Option<&'a str>,
    /// Follow `nextCursor` to the last page.
    pub all: bool,
    pub json: bool,
}

/// `tasks list`: one page (with a hint naming the next one), or with `--all`
/// every page. The gateway pages by key, so a long listing costs each page
/// the same, and tasks created meanwhile do not shift what comes next.
pub async fn list(gw: &GatewayClient, args: ListArgs<'_>) -> anyhow::Result<i32> {
    let limit = args.limit.to_string();
    let mut cursor = args.cursor.map(str::to_string);
    let mut all_tasks = Vec::new();
    let mut header_printed = false;
    let now = mcptask_core::Clock::now_ms(&mcptask_core::SystemClock);
    loop {
        let mut q = vec![("limit", limit.as_str())];
        for (name, value) in [
            ("status", args.status),
            ("outcome", args.outcome),
            ("server", args.server),
            ("principal", args.principal),
        ] {
            if let Some(v) = value {
                q.push((name, v));
            }
        }
        if args.active {
            q.push(("active", "true"));
        }
        if let Some(c) = cursor.as_deref() {
            q.push(("cursor", c));
        }
        let page = gw.get_query("/api/v1/tasks", &q).await?;
        let next = page["nextCursor"].as_str().map(str::to_string);
        let tasks = page["tasks"].as_array().cloned().unwrap_or_default();
        if args.json {
            if !args.all {
                outln!("{}", serde_json::to_string_pretty(&page)?);
                return Ok(exit::OK);
            }
            all_tasks.extend(tasks);
        } else {
            if !header_printed && !tasks.is_empty() {
                outln!(
                    "{:<36}  {:<15}  {:>5}  {:<12}  {:<28}  {:<13}  MESSAGE",
                    "ID",
                    "STATUS",
                    "AGE",
                    "PRINCIPAL",
                    "TOOL@SERVER",
                    "DRIVER/FACE"
                );
                header_printed = true;
            }
            for t in &tasks {
                outln!("{}", row(t, now));
            }
        }
        match next {
            Some(c) if args.all => cursor = Some(c),
            Some(c) => {
                if !args.json {
                    eprintln!("more tasks: mcptask tasks list --cursor {c} (or --all)");
                }
                break;
            }
            None => break,
        }
    }
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"tasks": all_tasks, "nextCursor": null}))?
        );
    } else if !header_printed {
        eprintln!("no tasks");
    }
    Ok(exit::OK)
}

fn row(t: &Value, now_ms: i64) -> String {
    let age = t["createdAt"]
        .as_str()
        .and_then(mcptask_core::time::parse_rfc3339)
        .map(|created| age(now_ms - created))
        .unwrap_or_default();
    format!(
        "{:<36}  {:<15}  {:>5}  {:<12}  {:<28}  {:<13}  {}",
        t["id"].as_str().unwrap_or(""),
        if tool_error(t) {
            "tool error"
        } else {
            t["status"].as_str().unwrap_or("")
        },
        age,
        t["principal"].as_str().unwrap_or("-"),
        format!(
            "{}@{}",
            t["tool"].as_str().unwrap_or(""),
            t["server"].as_str().unwrap_or("")
        ),
        format!(
            "{}/{}",
            t["driver"].as_str().unwrap_or("?"),
            t["face"].as_str().unwrap_or("-")
        ),
        t["statusMessage"].as_str().unwrap_or("")
    )
}

/// A duration as `kubectl get` shows ages: the largest unit, whole.
fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

pub async fn show(gw: &GatewayClient, id: &str, json_out: bool) -> anyhow::Result<i32> {
    let t = gw.get(&format!("/api/v1/tasks/{id}")).await?;
    if json_out {
        outln!("{}", serde_json::to_string_pretty(&t)?);
        return Ok(0);
    }
    outln!(
        "{}  {}  {}@{}",
        t["id"].as_str().unwrap_or(""),
        shown_status(&t),
        t["tool"].as_str().unwrap_or(""),
        t["server"].as_str().unwrap_or("")
    );
    if let Some(m) = t["statusMessage"].as_str() {
        outln!("message: {m}");
    }
    super::inputs::print(&t);
    outln!("timeline:");
    for e in t["timeline"].as_array().into_iter().flatten() {
        outln!(
            "  v{} {} {} {}",
            e["version"],
            e["occurredAt"].as_str().unwrap_or(""),
            e["kind"].as_str().unwrap_or(""),
            e["status"].as_str().unwrap_or("")
        );
    }
    if terminal(t["status"].as_str().unwrap_or("")) {
        // Inspecting is not waiting: the outcome is shown, and the command
        // itself succeeded whatever the task's status.
        print_outcome(&t);
    }
    Ok(exit::OK)
}

pub async fn cancel(gw: &GatewayClient, id: &str, json_out: bool) -> anyhow::Result<i32> {
    let t = gw
        .post(&format!("/api/v1/tasks/{id}/cancel"), &json!({}))
        .await?;
    if json_out {
        outln!("{}", serde_json::to_string_pretty(&t)?);
    }
    let status = t["status"].as_str().unwrap_or("?");
    if terminal(status) {
        eprintln!("the task is already {status}; there is nothing to cancel");
    } else {
        eprintln!("cancellation requested; the task is {status} until the server confirms");
    }
    Ok(exit::OK)
}

/// `answer ID KEY JSON`: for an elicitation, a bare object is taken as the
/// accepted content; other requests (sampling, roots) take the full result.
pub async fn answer(
    gw: &GatewayClient,
    id: &str,
    key: &str,
    response: &str,
    json_out: bool,
) -> anyhow::Result<i32> {
    let value: Value = serde_json::from_str(response)
        .with_context(|| format!("the answer is not valid JSON: {response}"))?;
    let task = gw.get(&format!("/api/v1/tasks/{id}")).await?;
    let value = super::pre_task::as_response(&task["inputRequests"][key], &value);
    let out = super::answers::send(gw, id, key, &value)
        .await
        .map_err(|e| match super::answers::refused(&e) {
            Some(_) => anyhow::anyhow!(
                "{e}\n  nothing was stored; see the question's fields and an example answer: mcptask tasks show {id}"
            ),
            None => e,
        })?;
    if json_out {
        outln!("{}", serde_json::to_string_pretty(&out)?);
    }
    if super::answers::stored(&out) {
        eprintln!("answer stored; it will be sent to the server");
        Ok(0)
    } else {
        eprintln!(
            "nothing stored: {key:?} is not an outstanding question of this task (or was already answered)"
        );
        Ok(exit::ERROR)
    }
}
