// Drives the gateway's dashboard in real headless Chromium (playwright-core,
// no browser download: the system's Chromium). Run by
// crates/mcptask/tests/browser/main.rs against a real `mcptask serve`
// and `mcptask demo-server`:
//
//   node dashboard.mjs --base http://127.0.0.1:PORT --token TOKEN \
//     --slow-task rt_… --front-task <front task id> --screenshot target/dashboard.png
//
// Environment: PLAYWRIGHT_CORE (the package directory), CHROMIUM (the browser
// binary), USER_DATA_DIR (a fresh, empty directory).
//
// Steps: load the dashboard (token in the URL fragment); see the task that
// already exists; create a confirm_delete task through the API *after* the
// page is loaded and see it appear without a reload; open it, answer its
// question through the generated form (which names each field's type and
// whether it is required, and shows a refused answer's message) and see it
// complete; open the other task, cancel
// it and see it cancelled; call a tool from the picker (server, then tool,
// then the form generated from its input schema) and see it complete; take
// a screenshot; find the call an MCP client made at the front as one row
// with its face, driver and upstream task, and cancel it; answer a REST call
// of the everything server's 2025-11-25 task tool through its form. Then the
// console: calls filtered by outcome (a failed call's error in words, a
// policy refusal from the audit trail), a call's timeline, a question
// answered from the inbox, the servers page (a killed server down, with its
// reason) and the policy per principal, each saved as a screenshot in --docs.
// Prints one JSON line `RESULT {...}` at the end; exits
// non-zero on any failure.

import { createRequire } from "node:module";
import process from "node:process";

const require = createRequire(import.meta.url);
const { chromium } = require(process.env.PLAYWRIGHT_CORE || "playwright-core");

function args() {
  const out = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--") || argv[i + 1] === undefined) throw new Error(`bad argument ${argv[i]}`);
    out[argv[i].slice(2)] = argv[i + 1];
  }
  for (const k of ["base", "token", "slow-task", "front-task", "broken-task", "report-task", "docs", "screenshot"]) if (!out[k]) throw new Error(`--${k} is required`);
  return out;
}

const opts = args();
const WAIT = 60_000;
const log = (...a) => console.log(new Date().toISOString(), ...a);

async function api(path, init = {}) {
  const res = await fetch(opts.base + path, {
    ...init,
    headers: { "Authorization": `Bearer ${opts.token}`, "Content-Type": "application/json", ...(init.headers || {}) },
  });
  const body = await res.json();
  if (!res.ok) throw new Error(`${init.method || "GET"} ${path}: HTTP ${res.status} ${JSON.stringify(body)}`);
  return body;
}

const context = await chromium.launchPersistentContext(process.env.USER_DATA_DIR, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1440, height: 900 },
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
const problems = [];
let navigations = 0;
try {
  const page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(WAIT);
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    // Chromium asks for /favicon.ico on its own; the gateway has none. The
    // answer refused on purpose (step 3) is logged as a failed load too.
    const url = m.location().url || "";
    const expected = url.endsWith("/favicon.ico") || (url.endsWith("/answers") && m.text().includes("400"));
    if (m.type() === "error" && !expected) problems.push(`console error: ${m.text()} (${url})`);
  });
  page.on("framenavigated", (f) => { if (f === page.mainFrame()) navigations += 1; });

  // 1. Load the dashboard; the event stream connects.
  await page.goto(`${opts.base}/#token=${encodeURIComponent(opts.token)}`);
  await page.locator("#live.on").waitFor();
  const loads = navigations;
  log("dashboard loaded and live");
  // A marker that a reload would wipe.
  await page.evaluate(() => { window.__sameDocument = true; });
  const row = (id) => page.locator(`tr.task[data-task-id="${id}"]`);
  const slowId = opts["slow-task"];
  await row(slowId).waitFor();
  log("the existing task is listed", slowId);

  // 2. A task created after the page loaded appears live.
  const created = await api("/api/v1/calls", {
    method: "POST",
    body: JSON.stringify({ server: "demo", tool: "confirm_delete", arguments: { filename: "browser-test.txt" } }),
  });
  if (created.outcome !== "task") throw new Error(`expected a task: ${JSON.stringify(created)}`);
  const askId = created.task.id;
  log("created", askId);
  await row(askId).waitFor();
  log("it appeared without a reload");
  await page.locator(`tr.task[data-task-id="${askId}"][data-status="input_required"]`).waitFor();
  log("it asks for input");

  // 3. Answer through the generated form.
  await row(askId).click();
  const form = page.locator('[data-testid="answer-form-confirm_delete"]');
  await form.waitFor();
  const message = await form.textContent();
  if (!message.includes("Delete browser-test.txt?")) throw new Error(`unexpected form: ${message}`);
  const hint = await form.locator('[data-field="confirm"] [data-testid="field-hint"]').textContent();
  if (!hint.includes("boolean") || !hint.includes("required")) throw new Error(`the field does not say what it is: ${hint}`);
  if (!(await form.locator('[data-field="confirm"] .req').count())) throw new Error("the required field is not marked");
  // A refused answer (the gateway checks answers against the requested
  // schema and names the field in a 400) is shown on the form, which stays.
  const refusal = 'answers["confirm_delete"].content.confirm must be a boolean';
  await page.route("**/answers", (route) => route.fulfill({
    status: 400, contentType: "application/json",
    body: JSON.stringify({ error: { code: "bad_request", message: refusal } }),
  }), { times: 1 });
  await form.locator('[data-testid="answer-submit"]').click();
  await form.locator('[data-testid="answer-error"]', { hasText: refusal }).waitFor();
  log("a refused answer shows the gateway's message");
  await form.locator('input[name="confirm"][type="checkbox"]').check();
  // The form re-renders on every poll of the task: the tick must survive.
  await page.waitForTimeout(1500);
  if (!(await form.locator('input[name="confirm"]').isChecked())) throw new Error("the form lost the tick while re-rendering");
  await form.locator('[data-testid="answer-submit"]').click();
  log("answered");
  await page.locator(`[data-testid="detail-card"][data-task-id="${askId}"][data-status="completed"]`).waitFor();
  await page.locator('[data-testid="result-text"]', { hasText: "Deleted browser-test.txt" }).waitFor();
  await page.locator(`tr.task[data-task-id="${askId}"][data-status="completed"]`).waitFor();
  log("completed: Deleted browser-test.txt");
  const stray = await page.locator('[data-testid="detail"]').evaluate((pane) =>
    [...pane.childNodes].filter((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim()).map((n) => n.textContent));
  if (stray.length) throw new Error(`stray text in the detail pane: ${JSON.stringify(stray)}`);

  // 4. Cancel the other task.
  await row(slowId).click();
  await page.locator(`[data-testid="detail-card"][data-task-id="${slowId}"]`).waitFor();
  await page.locator('[data-testid="cancel"]').click();
  log("cancel clicked");
  await page.locator(`[data-testid="detail-card"][data-task-id="${slowId}"][data-status="cancelled"]`).waitFor();
  await page.locator(`tr.task[data-task-id="${slowId}"][data-status="cancelled"]`).waitFor();
  log("cancelled");

  // Both settled, seen in the same document it was loaded in.
  const same = await page.evaluate(() => window.__sameDocument === true);
  if (!same || navigations !== loads) throw new Error(`the page reloaded (navigations ${navigations}, after load ${loads})`);

  // 5. Call a tool from the picker: the server's tools, its description, and
  // the arguments form generated from its input schema.
  await page.locator('[data-testid="call-server"]').selectOption("demo");
  const toolPick = page.locator('[data-testid="call-tool"]');
  await toolPick.locator('option[value="slow_compute"]').waitFor({ state: "attached" });
  await toolPick.selectOption("slow_compute");
  await page.locator('[data-testid="call-description"]', { hasText: "Sleep for" }).waitFor();
  const callForm = page.locator('[data-testid="call-form"]');
  const secondsHint = await callForm.locator('[data-field="seconds"] [data-testid="field-hint"]').textContent();
  if (!secondsHint.includes("number") || !secondsHint.includes("optional")) throw new Error(`unexpected hint for seconds: ${secondsHint}`);
  await callForm.locator('input[name="seconds"][type="number"]').fill("1");
  await callForm.locator('input[name="label"]').fill("picked in the browser");
  await page.locator('[data-testid="call-go"]').click();
  await page.waitForFunction(() => document.querySelector('[data-testid="call-out"]').dataset.taskId);
  const pickedId = await page.locator('[data-testid="call-out"]').getAttribute("data-task-id");
  log("called from the picker", pickedId);
  await page.locator(`[data-testid="detail-card"][data-task-id="${pickedId}"][data-status="completed"]`).waitFor();
  await page.locator('[data-testid="result-text"]', { hasText: "picked in the browser: computed in 1s" }).waitFor();
  await page.locator(`tr.task[data-task-id="${pickedId}"][data-status="completed"]`).waitFor();
  log("the picked call completed");

  // 5b. A form with a multi-select: deliver_report asks which sections to
  // send (an array of choices); the generated answer form offers them as a
  // multiple select, and the answer carries the picked ones as a list.
  await toolPick.selectOption("deliver_report");
  await page.locator('[data-testid="call-description"]', { hasText: "multi-select" }).waitFor();
  await page.locator('[data-testid="call-go"]').click();
  await page.waitForFunction((prev) => {
    const id = document.querySelector('[data-testid="call-out"]').dataset.taskId;
    return id && id !== prev;
  }, pickedId);
  const reportId = await page.locator('[data-testid="call-out"]').getAttribute("data-task-id");
  log("deliver_report started", reportId);
  const delivery = page.locator('[data-testid="answer-form-delivery"]');
  await delivery.waitFor();
  const sectionsHint = await delivery.locator('[data-field="sections"] [data-testid="field-hint"]').textContent();
  if (!sectionsHint.includes("any of: summary, details, appendix")) throw new Error(`unexpected hint for sections: ${sectionsHint}`);
  await delivery.locator('select[name="format"]').selectOption("csv");
  await delivery.locator('select[name="sections"]').selectOption(["summary", "appendix"]);
  await delivery.locator('[data-testid="answer-submit"]').click();
  await page.locator(`[data-testid="detail-card"][data-task-id="${reportId}"][data-status="completed"]`).waitFor();
  await page.locator('[data-testid="result-text"]', { hasText: "Delivering 1 csv report(s) with summary+appendix" }).waitFor();
  log("the multi-select answer was taken");
  // Schemas a form cannot express fall back to raw JSON.
  const formability = await page.evaluate(() => [
    formable({ type: "object", properties: { a: { type: "number" }, b: { enum: ["x", "y"] }, c: { type: "boolean" } } }),
    formable({ type: "object", properties: { nested: { type: "object", properties: {} } } }),
    formable({ type: "object", properties: { list: { type: "array", items: { type: "string" } } } }),
    formable({ type: "object", properties: { tags: { type: "array", items: { enum: ["a", "b"] } } } }),
  ]);
  if (JSON.stringify(formability) !== "[true,false,false,true]") throw new Error(`form/JSON choice: ${formability}`);

  // 6. The README's screenshot: the answered task selected, the list beside it.
  await row(askId).click();
  await page.locator(`[data-testid="detail-card"][data-task-id="${askId}"]`).waitFor();
  await page.screenshot({ path: opts.screenshot });
  log("screenshot", opts.screenshot);

  // 7. A call made at the MCP front is one row of the same list: it names
  // its face and the driver that follows it upstream, its detail names the
  // upstream's task, and it is cancelled from here (the cancel travels
  // through the tracker to the demo server and back to the MCP client).
  const frontId = opts["front-task"];
  const frontRow = row(frontId);
  await frontRow.waitFor();
  const driverOf = await frontRow.locator('[data-testid="driver"]').getAttribute("data-driver");
  const faceOf = await frontRow.locator('[data-testid="face"]').getAttribute("data-face");
  if (driverOf !== "sep2663" || faceOf !== "mcp") throw new Error(`the front call's row: driver ${driverOf}, face ${faceOf}`);
  const sameCall = await page.locator(`tr.task[data-task-id="${frontId}"]`).count();
  if (sameCall !== 1) throw new Error(`the front call is listed ${sameCall} times`);
  await frontRow.click();
  const frontCard = page.locator(`[data-testid="detail-card"][data-task-id="${frontId}"]`);
  await frontCard.waitFor();
  await frontCard.locator('[data-testid="detail-driver"][data-driver="sep2663"]').waitFor();
  const upstreamTask = (await frontCard.locator('[data-testid="upstream-task"]').textContent()).trim();
  if (!upstreamTask || upstreamTask === frontId) throw new Error(`no upstream task named: ${upstreamTask}`);
  log("the front call is one row naming its driver and upstream task", upstreamTask);
  await frontCard.locator('[data-testid="cancel"]').click();
  await page.locator(`tr.task[data-task-id="${frontId}"][data-status="cancelled"]`).waitFor();
  log("the front call is cancelled");

  // 8. A REST call of a 2025-11-25 task tool (the everything server's
  // research query) asks a question; it is answered from the dashboard.
  const research = await api("/api/v1/calls", {
    method: "POST",
    body: JSON.stringify({ server: "ev", tool: "simulate-research-query", arguments: { topic: "rust", ambiguous: true } }),
  });
  if (research.outcome !== "task" || research.task.driver !== "sep1686") throw new Error(`expected a 2025-11-25 task: ${JSON.stringify(research)}`);
  const researchId = research.task.id;
  await page.locator(`tr.task[data-task-id="${researchId}"][data-status="input_required"]`).waitFor();
  await row(researchId).click();
  const clarify = page.locator(`[data-testid^="answer-form-"][data-task-id="${researchId}"]`);
  await clarify.waitFor();
  await clarify.locator('select[name="interpretation"]').selectOption("technical");
  await clarify.locator('[data-testid="answer-submit"]').click();
  await page.locator(`[data-testid="detail-card"][data-task-id="${researchId}"][data-status="completed"]`).waitFor();
  await page.locator(`tr.task[data-task-id="${researchId}"][data-status="completed"]`).waitFor();
  log("the 2025-11-25 task was answered from the dashboard and completed", researchId);

  // 9. The console's calls, filtered by the gateway: failed ones only. The
  // failed call's error reads as words, its JSON folded away.
  const brokenId = opts["broken-task"], reportId2 = opts["report-task"];
  const outcomeFilter = page.locator('[data-testid="filter-outcome"]');
  await outcomeFilter.selectOption("failed");
  await page.waitForFunction(([b, r]) => {
    const rows = [...document.querySelectorAll("tr.task")];
    return rows.some((x) => x.dataset.taskId === b) && !rows.some((x) => x.dataset.taskId === r) &&
      rows.every((x) => x.dataset.outcome === "failed");
  }, [brokenId, reportId2]);
  log("filtered by outcome: only failed calls are listed");
  await row(brokenId).click();
  const brokenCard = page.locator(`[data-testid="detail-card"][data-task-id="${brokenId}"]`);
  await brokenCard.waitFor();
  const errorText = await page.locator('[data-testid="error-message"]').textContent();
  if (!errorText.includes("protocol_error_job: internal failure")) throw new Error(`the error is not in words: ${errorText}`);
  if (errorText.includes("{")) throw new Error(`the error is shown as JSON: ${errorText}`);
  if (await page.locator('[data-testid="error"] pre').isVisible()) throw new Error("the raw error is not folded away");
  await page.screenshot({ path: `${opts.docs}/calls.png` });
  log("the failed call's error reads as words");
  // An interrupted call's error (as core::server::interrupted_error writes
  // it) reads as words too: its message, reason and attempt.
  const interrupted = await page.evaluate(() => {
    const view = errorView({ code: -32603, message: "task interrupted: the server process running attempt 2 stopped before it finished",
      data: { reason: "interrupted", attempt: 2 } });
    return [view.querySelector('[data-testid="error-message"]').textContent, view.children[1].textContent];
  });
  if (!interrupted[0].startsWith("task interrupted") || interrupted[1] !== "reason: interrupted · attempt: 2 · code -32603 (internal error)") {
    throw new Error(`an interrupted call's error: ${JSON.stringify(interrupted)}`);
  }
  // Refusals come from the audit trail: bob's call the policy refused.
  await outcomeFilter.selectOption("refused_policy");
  const refused = page.locator('tr[data-testid="audit-row"][data-outcome="refused_policy"]', { hasText: "confirm_delete" });
  await refused.waitFor();
  if (!(await refused.textContent()).includes("bob")) throw new Error(`the refusal does not name bob: ${await refused.textContent()}`);
  log("the policy's refusal is listed from the audit trail");
  await outcomeFilter.selectOption("");
  await row(askId).waitFor();

  // 10. An answered call's timeline: made, asked, answered, completed.
  await row(askId).click();
  const timeline = page.locator(`[data-testid="detail"]:has([data-testid="detail-card"][data-task-id="${askId}"]) [data-testid="timeline"]`);
  await timeline.locator('li[data-kind="asked"]', { hasText: "Delete browser-test.txt?" }).waitFor();
  await timeline.locator('li[data-kind="answered_input"]', { hasText: "confirm = true" }).waitFor();
  const kinds = await timeline.locator("li").evaluateAll((items) => items.map((i) => i.dataset.kind));
  const at = (k) => kinds.indexOf(k);
  if (!(at("created") === 0 && at("asked") > 0 && at("answered_input") > at("asked"))) throw new Error(`the timeline is out of order: ${kinds}`);
  if (!(await timeline.locator("li", { hasText: "completed" }).count())) throw new Error(`the timeline does not end completed: ${kinds}`);
  await page.screenshot({ path: `${opts.docs}/timeline.png` });
  log("the timeline shows the question and its answer", kinds.join(" "));

  // 11. The inbox: a question asked after the page loaded is answered there.
  const inboxCall = await api("/api/v1/calls", {
    method: "POST",
    body: JSON.stringify({ server: "demo", tool: "confirm_delete", arguments: { filename: "inbox.txt" } }),
  });
  const inboxId = inboxCall.task.id;
  await page.locator('[data-testid="tab-inbox"]').click();
  const item = page.locator(`[data-testid="inbox-item"][data-task-id="${inboxId}"]`);
  await item.waitFor();
  const asked = item.locator('[data-testid="answer-form-confirm_delete"]');
  if (!(await asked.textContent()).includes("Delete inbox.txt?")) throw new Error(`unexpected inbox form: ${await asked.textContent()}`);
  await page.locator('[data-testid="inbox-count"]').filter({ hasText: /\d/ }).waitFor();
  await asked.locator('input[name="confirm"]').check();
  await page.screenshot({ path: `${opts.docs}/inbox.png` });
  await asked.locator('[data-testid="answer-submit"]').click();
  await item.waitFor({ state: "detached" });
  log("answered from the inbox", inboxId);

  // 12. Servers: the killed one is down with its reason; the other shows
  // its numbers and charts.
  await page.locator('[data-testid="tab-servers"]').click();
  const flakyCard = page.locator('[data-testid="server-card"][data-server="flaky"][data-state="down"]');
  await flakyCard.waitFor();
  const why = await flakyCard.locator('[data-testid="server-reason"]').textContent();
  if (!why.includes("connection refused")) throw new Error(`the down server's reason: ${why}`);
  const demoCard = page.locator('[data-testid="server-card"][data-server="demo"]');
  const demoCalls = Number(await demoCard.locator('[data-testid="calls"]').textContent());
  if (!(demoCalls >= 4)) throw new Error(`the demo server's calls: ${demoCalls}`);
  if ((await demoCard.getAttribute("data-state")) !== "degraded") throw new Error(`demo should be degraded (1 tool error in ${demoCalls}): ${await demoCard.getAttribute("data-state")}`);
  if (!(await demoCard.locator('[data-testid="error-rate"]').textContent()).endsWith("%")) throw new Error("no error rate");
  const greetRow = demoCard.locator('[data-testid="server-tools"] tr[data-tool="greet"]');
  const greetCalls = (await greetRow.locator("td").nth(1).textContent()).trim();
  if (greetCalls !== "3") throw new Error(`greet's calls: ${greetCalls}`);
  if (!(await demoCard.locator('svg[data-testid="sparkline"] polyline').count())) throw new Error("no chart");
  await page.screenshot({ path: `${opts.docs}/servers.png` });
  log("servers: flaky down,", why);

  // 13. The policy per principal: bob may not call demo/confirm_delete.
  await page.locator('[data-testid="tab-policy"]').click();
  const cell = (p) => page.locator(`[data-testid="policy-table"] tr[data-tool="demo/confirm_delete"] td[data-principal="${p}"]`);
  await cell("bob").waitFor();
  if ((await cell("bob").getAttribute("data-allowed")) !== "false") throw new Error("bob may call demo/confirm_delete?");
  if ((await cell("alice").getAttribute("data-allowed")) !== "true") throw new Error("alice may not call demo/confirm_delete?");
  const ruleText = await page.locator('[data-testid="policy-rules"] li').first().textContent();
  if (ruleText !== "principal bob: deny demo/confirm_delete") throw new Error(`the rule in words: ${ruleText}`);
  await page.screenshot({ path: `${opts.docs}/policy.png` });
  log("the policy per principal is shown");
  await page.locator('[data-testid="tab-calls"]').click();
  await row(askId).waitFor();

  const statuses = await page.locator("tr.task").evaluateAll((rows) => rows.map((r) => [r.dataset.taskId, r.dataset.status]));
  if (problems.length) throw new Error(`the page reported problems:\n${problems.join("\n")}`);
  console.log("RESULT " + JSON.stringify({ askId, slowId, pickedId, reportId, researchId, inboxId, upstreamTask, statuses: Object.fromEntries(statuses) }));
} catch (e) {
  // What the page showed when it stopped: the stream's state, the list's
  // count line and rows, any error it displayed.
  let shown = "(no page)";
  try {
    const page = context.pages()[0];
    if (page) {
      shown = JSON.stringify(await page.evaluate(() => ({
        live: document.getElementById("live")?.textContent,
        count: document.getElementById("count")?.textContent,
        rows: [...document.querySelectorAll("tr.task")].map((r) => `${r.dataset.taskId}:${r.dataset.status}`),
        errors: [...document.querySelectorAll(".err")].map((x) => x.textContent),
      })));
      await page.screenshot({ path: opts.screenshot.replace(/\.png$/, "-failure.png") });
    }
  } catch (_) { /* best effort */ }
  const first = String((e && e.message) || e).split("\n").slice(0, 3).join(" ");
  console.error(`FAILED: ${first}`);
  console.error(`page: ${shown}`);
  if (problems.length) console.error(`problems: ${problems.join(" / ")}`);
  console.error(e && e.stack ? e.stack : e);
  process.exitCode = 1;
} finally {
  await context.close();
}
