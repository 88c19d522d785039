// Does the everything server exit when its stdin closes (parent SIGKILLed), with work in flight?
import { spawn } from "node:child_process";
const SERVER = new URL("./node_modules/@modelcontextprotocol/server-everything/dist/index.js", import.meta.url).pathname;
const c = spawn(process.execPath, [SERVER, "stdio"], { stdio: ["pipe", "pipe", "pipe"] });
const t0 = Date.now();
const send = (m) => c.stdin.write(JSON.stringify(m) + "\n");
send({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: { elicitation: {} }, clientInfo: { name: "p", version: "0" } } });
send({ jsonrpc: "2.0", method: "notifications/initialized" });
let discover;
c.stdout.on("data", (d) => { for (const l of String(d).split("\n")) if (l.includes('"id":9')) discover = JSON.parse(l); });
setTimeout(() => {
  send({ jsonrpc: "2.0", id: 9, method: "server/discover", params: {} });
  send({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "trigger-long-running-operation", arguments: { duration: 6, steps: 3 }, _meta: { progressToken: 1 } } });
  send({ jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "simulate-research-query", arguments: { topic: "x" }, task: { ttl: 60000 } } });
  setTimeout(() => { c.stdin.end(); console.log(JSON.stringify({ serverDiscoverAnswer: discover, stdinClosedAtMs: Date.now() - t0 })); }, 500);
}, 1500);
c.on("exit", (code, sig) => { console.log(JSON.stringify({ childExitedAtMs: Date.now() - t0, code, sig })); process.exit(0); });
setTimeout(() => { console.log(JSON.stringify({ stillAliveAfterMs: Date.now() - t0 })); c.kill("SIGKILL"); }, 15000);
