// Probe @modelcontextprotocol/server-everything over stdio with raw JSON-RPC.
// Usage: node probe.mjs [scenario...]   (default: all but "elicit-timeout")
// Prints one JSON line per event: {t, dir, msg} (t = ms since the child was spawned),
// followed by a summary block per scenario.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const SERVER = path.join(here, "node_modules/@modelcontextprotocol/server-everything/dist/index.js");

class Conn {
  constructor(label, { quiet = false } = {}) {
    this.label = label;
    this.quiet = quiet;
    this.t0 = Date.now();
    this.nextId = 1;
    this.pending = new Map();
    this.log = [];
    this.onRequest = null; // (msg) => result | Promise<result>
    this.onNotification = null;
    this.child = spawn(process.execPath, [SERVER, "stdio"], { stdio: ["pipe", "pipe", "pipe"] });
    this.stderr = "";
    this.child.stderr.on("data", (d) => (this.stderr += d));
    createInterface({ input: this.child.stdout }).on("line", (line) => this.#recv(line));
  }
  t() { return Date.now() - this.t0; }
  #record(dir, msg) {
    const e = { t: this.t(), dir, msg };
    this.log.push(e);
    if (!this.quiet) console.log(JSON.stringify({ s: this.label, ...e }));
  }
  #send(msg) { this.#record(">", msg); this.child.stdin.write(JSON.stringify(msg) + "\n"); }
  async #recv(line) {
    let msg;
    try { msg = JSON.parse(line); } catch { this.#record("<!", line); return; }
    this.#record("<", msg);
    if (msg.id !== undefined && msg.method === undefined) {
      const p = this.pending.get(msg.id);
      if (p) { this.pending.delete(msg.id); p({ ...msg, t: this.t() }); }
    } else if (msg.id !== undefined && msg.method) {
      const r = this.onRequest ? await this.onRequest(msg) : undefined;
      if (r === undefined) this.#send({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "not handled by probe" } });
      else if (r && r.__error) this.#send({ jsonrpc: "2.0", id: msg.id, error: r.__error });
      else this.#send({ jsonrpc: "2.0", id: msg.id, result: r });
    } else if (this.onNotification) this.onNotification(msg);
  }
  request(method, params) {
    const id = this.nextId++;
    const sentAt = this.t();
    return new Promise((resolve) => {
      this.pending.set(id, (m) => resolve({ ...m, sentAt, ms: m.t - sentAt }));
      this.#send({ jsonrpc: "2.0", id, method, ...(params === undefined ? {} : { params }) });
    });
  }
  notify(method, params) { this.#send({ jsonrpc: "2.0", method, ...(params === undefined ? {} : { params }) }); }
  async init(capabilities, protocolVersion = "2025-11-25") {
    const r = await this.request("initialize", {
      protocolVersion,
      capabilities,
      clientInfo: { name: "mcptask-probe", version: "0" },
    });
    this.notify("notifications/initialized");
    await sleep(100);
    return r;
  }
  close() { this.child.kill("SIGKILL"); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const CAPS_FULL = { elicitation: {}, sampling: {} };
const out = {};
const summary = (name, v) => { out[name] = v; console.log(`=== ${name}\n` + JSON.stringify(v, null, 2)); };

async function pollUntil(c, taskId, pred, every = 200, maxMs = 30000) {
  const seen = [];
  const start = c.t();
  for (;;) {
    const r = await c.request("tasks/get", { taskId });
    const res = r.result ?? r.error;
    const last = seen[seen.length - 1];
    if (!last || last.status !== res.status || last.statusMessage !== res.statusMessage)
      seen.push({ t: c.t() - start, status: res.status, statusMessage: res.statusMessage });
    if (r.error || pred(res)) return { final: res, seen };
    if (c.t() - start > maxMs) return { final: res, seen, timedOut: true };
    await sleep(every);
  }
}

const scenarios = {
  async init() {
    const c = new Conn("init");
    const notes = [];
    c.onNotification = (m) => notes.push({ t: c.t(), method: m.method });
    const r = await c.init(CAPS_FULL);
    const r2026 = await (async () => {
      const c2 = new Conn("init-2026", { quiet: true });
      const x = await c2.request("initialize", { protocolVersion: "2026-07-28", capabilities: {}, clientInfo: { name: "p", version: "0" } });
      c2.close();
      return { protocolVersion: x.result?.protocolVersion, error: x.error };
    })();
    await sleep(600);
    const lt = await c.request("tools/list", {});
    const tools = lt.result.tools.map((t) => ({ name: t.name, execution: t.execution, annotations: t.annotations && { idempotentHint: t.annotations.idempotentHint, readOnlyHint: t.annotations.readOnlyHint } }));
    // a client without elicitation/sampling capabilities
    const c3 = new Conn("init-bare", { quiet: true });
    await c3.init({});
    const lt3 = await c3.request("tools/list", {});
    c3.close();
    const pl = await c.request("prompts/list", {});
    const rl = await c.request("resources/list", {});
    const tl = await c.request("tasks/list", {});
    summary("init", {
      initializeMs: r.ms,
      protocolVersion: r.result.protocolVersion,
      capabilities: r.result.capabilities,
      serverInfo: r.result.serverInfo,
      answerTo2026_07_28: r2026,
      notificationsAfterInitialized: notes,
      toolsListMs: lt.ms,
      tools,
      toolsWithoutElicitationSamplingCaps: lt3.result.tools.map((t) => t.name),
      prompts: pl.result?.prompts?.map((p) => p.name),
      resourcesFirstPage: rl.result?.resources?.length,
      resourcesNextCursor: rl.result?.nextCursor,
      tasksListEmpty: tl.result ?? tl.error,
    });
    c.close();
  },

  async notask() {
    const c = new Conn("notask");
    await c.init(CAPS_FULL);
    const r = await c.request("tools/call", { name: "simulate-research-query", arguments: { topic: "x" } });
    const r2 = await c.request("tools/call", { name: "echo", arguments: { message: "hi" }, task: { ttl: 60000 } });
    const r3 = await c.request("tasks/get", { taskId: "no-such-task" });
    const r4 = await c.request("tasks/result", { taskId: "no-such-task" });
    const r5 = await c.request("tasks/cancel", { taskId: "no-such-task" });
    summary("notask", { taskRequiredWithoutTask: r.error ?? r.result, nonTaskToolWithTaskParam: r2.result ?? r2.error, getUnknown: r3.error ?? r3.result, resultUnknown: r4.error ?? r4.result, cancelUnknown: r5.error ?? r5.result });
    c.close();
  },

  async task() {
    const c = new Conn("task");
    await c.init(CAPS_FULL);
    const cr = await c.request("tools/call", {
      name: "simulate-research-query",
      arguments: { topic: "rust", ambiguous: false },
      task: { ttl: 60000 },
      _meta: { progressToken: "pt-1" },
    });
    const taskId = cr.result.task.taskId;
    const polled = await pollUntil(c, taskId, (t) => ["completed", "failed", "cancelled"].includes(t.status));
    const res = await c.request("tasks/result", { taskId });
    const again = await c.request("tasks/result", { taskId });
    const getAfter = await c.request("tasks/get", { taskId });
    const cancelDone = await c.request("tasks/cancel", { taskId });
    const list = await c.request("tasks/list", {});
    summary("task", {
      createMs: cr.ms,
      createTaskResult: cr.result,
      statusSequence: polled.seen,
      finalGet: polled.final,
      tasksResult: { ms: res.ms, _meta: res.result?._meta, contentTypes: res.result?.content?.map((x) => x.type), textStart: res.result?.content?.[0]?.text?.slice(0, 60) },
      tasksResultSecondTime: again.result ? "same result again" : again.error,
      getAfterResult: getAfter.result ?? getAfter.error,
      cancelCompleted: cancelDone.error ?? cancelDone.result,
      tasksList: list.result,
    });
    c.close();
  },

  async elicit() {
    const c = new Conn("elicit");
    let elicitReq = null;
    c.onRequest = async (m) => {
      if (m.method === "elicitation/create") {
        elicitReq = { t: c.t(), msg: m };
        return { action: "accept", content: { interpretation: "historical" } };
      }
    };
    await c.init(CAPS_FULL);
    const cr = await c.request("tools/call", { name: "simulate-research-query", arguments: { topic: "python", ambiguous: true }, task: { ttl: 120000 } });
    const taskId = cr.result.task.taskId;
    const polled = await pollUntil(c, taskId, (t) => t.status === "input_required" || ["completed", "failed", "cancelled"].includes(t.status));
    await sleep(1500);
    const stillInput = await c.request("tasks/get", { taskId });
    const res = await c.request("tasks/result", { taskId });
    const after = await c.request("tasks/get", { taskId });
    summary("elicit", {
      statusSequenceBeforeTasksResult: polled.seen,
      stillInputRequiredAfter1500ms: stillInput.result.status,
      elicitationRequest: elicitReq && { receivedAtMsAfterTasksResultSent: elicitReq.t - res.sentAt, ...elicitReq.msg },
      tasksResultMs: res.ms,
      tasksResultText: res.result?.content?.[0]?.text?.match(/Research Report: .*/)?.[0],
      tasksResultMeta: res.result?._meta,
      finalGet: after.result,
    });
    c.close();
  },

  async "elicit-timeout"() {
    // input_required but the client never calls tasks/result: does the queued request time out?
    const c = new Conn("elicit-timeout", { quiet: true });
    c.onRequest = async (m) => (m.method === "elicitation/create" ? { action: "accept", content: { interpretation: "current" } } : undefined);
    await c.init(CAPS_FULL);
    const cr = await c.request("tools/call", { name: "simulate-research-query", arguments: { topic: "python", ambiguous: true }, task: { ttl: 300000 } });
    const taskId = cr.result.task.taskId;
    const polled = await pollUntil(c, taskId, (t) => ["completed", "failed", "cancelled"].includes(t.status), 2000, 90000);
    const res = await c.request("tasks/result", { taskId });
    summary("elicit-timeout", { statusSequence: polled.seen, stderr: c.stderr.split("\n").filter((l) => /Elicitation|timed out/i.test(l)), text: res.result?.content?.[0]?.text?.match(/Research Report: .*/)?.[0] });
    c.close();
  },

  async "elicit-decline-late"() {
    // answer the elicitation after tasks/result was sent but only 2 s later; and call tasks/result twice concurrently
    const c = new Conn("elicit-late", { quiet: true });
    const reqs = [];
    c.onRequest = async (m) => {
      if (m.method === "elicitation/create") { reqs.push(c.t()); await sleep(2000); return { action: "decline" }; }
    };
    await c.init(CAPS_FULL);
    const cr = await c.request("tools/call", { name: "simulate-research-query", arguments: { topic: "rust", ambiguous: true }, task: { ttl: 120000 } });
    const taskId = cr.result.task.taskId;
    await pollUntil(c, taskId, (t) => t.status === "input_required");
    const [a, b] = await Promise.all([c.request("tasks/result", { taskId }), c.request("tasks/result", { taskId })]);
    summary("elicit-decline-late", { elicitationDeliveries: reqs.length, firstMs: a.ms, secondMs: b.ms, text: a.result?.content?.[0]?.text?.match(/Research Report: .*/)?.[0] });
    c.close();
  },

  async cancel() {
    const c = new Conn("cancel");
    await c.init(CAPS_FULL);
    const cr = await c.request("tools/call", { name: "simulate-research-query", arguments: { topic: "rust" }, task: { ttl: 60000 } });
    const taskId = cr.result.task.taskId;
    await sleep(1200);
    const before = await c.request("tasks/get", { taskId });
    const cx = await c.request("tasks/cancel", { taskId });
    await sleep(4000);
    const after = await c.request("tasks/get", { taskId });
    const res = await c.request("tasks/result", { taskId });
    const cx2 = await c.request("tasks/cancel", { taskId });
    summary("cancel", { before: before.result, cancelResult: cx.result ?? cx.error, getAfter4s: after.result, tasksResultAfterCancel: res.result ?? res.error, secondCancel: cx2.error ?? cx2.result });
    c.close();
  },

  async ttl() {
    const c = new Conn("ttl", { quiet: true });
    await c.init(CAPS_FULL);
    const cr = await c.request("tools/call", { name: "simulate-research-query", arguments: { topic: "rust" }, task: { ttl: 1000 } });
    const taskId = cr.result.task.taskId;
    await sleep(6000);
    const g = await c.request("tasks/get", { taskId });
    const cr2 = await c.request("tools/call", { name: "simulate-research-query", arguments: { topic: "rust" }, task: {} });
    summary("ttl", { requestedTtl1000_createTask: cr.result.task, getAfter6s: g.result ?? g.error, noTtlGiven_createTask: cr2.result.task });
    c.close();
  },

  async progress() {
    const c = new Conn("progress");
    const prog = [];
    c.onNotification = (m) => { if (m.method === "notifications/progress") prog.push({ t: c.t(), params: m.params }); };
    await c.init(CAPS_FULL);
    const r = await c.request("tools/call", { name: "trigger-long-running-operation", arguments: { duration: 3, steps: 3 }, _meta: { progressToken: "tok-7" } });
    const n = prog.length;
    const r2 = await c.request("tools/call", { name: "trigger-long-running-operation", arguments: { duration: 1, steps: 2 } });
    const n2 = prog.length - n;
    // cancel a long call with notifications/cancelled
    const p3 = c.request("tools/call", { name: "trigger-long-running-operation", arguments: { duration: 4, steps: 4 }, _meta: { progressToken: 99 } });
    await sleep(1500);
    const cancelledId = c.nextId - 1;
    c.notify("notifications/cancelled", { requestId: cancelledId, reason: "probe" });
    const r3 = await Promise.race([p3, sleep(5000).then(() => "no response within 5s")]);
    await sleep(500);
    summary("progress", {
      withToken: { ms: r.ms, result: r.result, notifications: prog.slice(0, n).map((p) => ({ atMsAfterCall: p.t - r.sentAt, ...p.params })) },
      withoutToken: { ms: r2.ms, progressNotifications: n2, result: r2.result?.content?.[0]?.text },
      cancelledMidway: { response: typeof r3 === "string" ? r3 : r3, progressAfterCancel: prog.filter((p) => p.params.progressToken === 99).map((p) => p.params.progress) },
    });
    c.close();
  },

  async "result-early"() {
    // tasks/result sent right after creation: it blocks, carries the elicitation, then the result
    const c = new Conn("result-early", { quiet: true });
    const ev = [];
    c.onRequest = async (m) => {
      if (m.method === "elicitation/create") { ev.push({ t: c.t(), got: "elicitation/create", id: m.id }); return { action: "accept", content: { interpretation: "snake" } }; }
    };
    c.onNotification = (m) => { if (m.method === "notifications/tasks/status") ev.push({ t: c.t(), status: m.params.status }); };
    await c.init(CAPS_FULL);
    const cr = await c.request("tools/call", { name: "simulate-research-query", arguments: { topic: "python", ambiguous: true }, task: { ttl: 60000 } });
    const taskId = cr.result.task.taskId;
    const res = await c.request("tasks/result", { taskId });
    summary("result-early", { tasksResultSentAt: res.sentAt, tasksResultMs: res.ms, events: ev, text: res.result?.content?.[0]?.text?.match(/Research Report: .*/)?.[0] });
    c.close();
  },

  async restart() {
    const c = new Conn("restart", { quiet: true });
    await c.init(CAPS_FULL);
    const cr = await c.request("tools/call", { name: "simulate-research-query", arguments: { topic: "rust" }, task: { ttl: 60000 } });
    const taskId = cr.result.task.taskId;
    c.close();
    const c2 = new Conn("restart-2", { quiet: true });
    await c2.init(CAPS_FULL);
    const g = await c2.request("tasks/get", { taskId });
    summary("restart", { getAfterRespawn: g.error ?? g.result });
    c2.close();
  },

  async "sync-elicit"() {
    const c = new Conn("sync-elicit");
    c.onRequest = async (m) => {
      if (m.method === "elicitation/create") return { action: "accept", content: { name: "Ada", color: "blue" } };
      if (m.method === "sampling/createMessage") return { role: "assistant", content: { type: "text", text: "sampled!" }, model: "probe", stopReason: "endTurn" };
    };
    await c.init(CAPS_FULL);
    const t0 = c.t();
    const r = await c.request("tools/call", { name: "trigger-elicitation-request", arguments: {} });
    const s = await c.request("tools/call", { name: "trigger-sampling-request", arguments: { prompt: "hi", maxTokens: 10 } });
    const reqs = c.log.filter((e) => e.dir === "<" && e.msg.method && e.msg.id !== undefined).map((e) => e.msg);
    summary("sync-elicit", { serverRequests: reqs, elicitToolResult: r.result?.content?.map((x) => x.text?.slice(0, 120)), samplingToolResult: s.result?.content?.map((x) => x.text?.slice(0, 120)) });
    c.close();
  },
};

const want = process.argv.slice(2);
const names = want.length ? want : Object.keys(scenarios).filter((n) => n !== "elicit-timeout");
for (const n of names) await scenarios[n]();
process.exit(0);
