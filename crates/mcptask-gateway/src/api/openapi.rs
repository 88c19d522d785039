//! `GET /openapi.json`: the API described as OpenAPI 3.1.

use axum::Json;
use mcptask_core::call::{Driver, Face};
use serde_json::{Value, json};

fn error_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

fn ok(description: &str, schema: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}})
}

fn task_id_param() -> Value {
    json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string"}, "description": "Local task id (rt_…)"})
}

/// The document (also used by tests to check every route is described).
pub fn spec() -> Value {
    let drivers = Driver::ALL;
    let faces = Face::ALL;
    let common_errors = json!({
        "401": error_response("Missing or unknown API token"),
        "400": error_response("Malformed request"),
    });
    let with = |mut responses: Value| {
        for (k, v) in common_errors.as_object().expect("object") {
            responses[k] = v.clone();
        }
        responses
    };
    let mut answer_responses = with(
        json!({"200": ok("What was stored", "AnswerResult"), "404": error_response("Unknown task"), "413": error_response("Body too large")}),
    );
    answer_responses["400"] = error_response(
        "Malformed request, or an answer that does not fit its question (`invalid_answer`: nothing stored)",
    );
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "mcptask gateway API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Durable tracking of remote MCP tasks (SEP-2663). Send `Authorization: Bearer <token>` unless the gateway runs with auth = \"none\". Errors are JSON: {\"error\": {\"code\": <stable code>, \"message\": <text>}}."
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
                    "code": {"type": "string", "enum": ["bad_request", "unauthorized", "insufficient_scope", "not_ready", "unknown_tool", "forbidden", "not_found", "unknown_server", "payload_too_large", "unsupported_media_type", "remote_error", "unavailable", "busy", "protocol_error", "input_needed", "invalid_answer", "timeout", "shutting_down", "store_unavailable", "metrics_disabled"]},
                    "message": {"type": "string"},
                    "details": {}
                }}}},
                "Status": {"type": "string", "enum": ["working", "input_required", "completed", "failed", "cancelled"]},
                "TaskSummary": {"type": "object", "required": ["id", "server", "tool", "status", "createdAt", "updatedAt"], "properties": {
                    "id": {"type": "string"}, "server": {"type": "string"}, "tool": {"type": "string"},
                    "driver": {}, "face": {},
                    "status": {"$ref": "#/components/schemas/Status"}, "statusMessage": {"type": ["string", "null"]},
                    "principal": {"type": ["string", "null"]}, "conversation": {"type": ["string", "null"]}, "callId": {"type": ["string", "null"]},
                    "correlation": {}, "createdAt": {"type": "string", "format": "date-time"}, "updatedAt": {"type": "string", "format": "date-time"},
                    "completedAt": {"type": ["string", "null"], "format": "date-time"}, "cancelRequested": {"type": "boolean"}, "toolError": {"type": "boolean", "description": "completed, with the tool's own error (isError)"}, "outcome": {"type": ["string", "null"], "enum": ["completed", "tool_error", "failed", "cancelled", null], "description": "how the call ended (null while live): tool_error apart from completed, though both have the wire status completed"},
                    "attempt": {"type": "integer", "description": "which run of the call's work: 1, then one more per rerun after an interruption"},
                    "pollCount": {"type": "integer"}, "consecutiveErrors": {"type": "integer"}, "lastError": {"type": ["string", "null"]},
                    "inputRequests": {"type": "object", "additionalProperties": true},
                    "remoteTaskId": {"type": "string", "description": "The upstream's task id of a sep2663 or toolset call (operators only)"}
                }},
                "TaskDetail": {"allOf": [{"$ref": "#/components/schemas/TaskSummary"}, {"type": "object", "properties": {
                    "arguments": {}, "result": {}, "resultTruncated": {"type": "boolean"}, "error": {},
                    "inputs": {"type": "array", "items": {"type": "object", "properties": {"key": {"type": "string"}, "request": {}, "answered": {"type": "boolean"}, "response": {"description": "The stored answer (null until answered)"}}}},
                    "timeline": {"type": "array", "items": {"$ref": "#/components/schemas/TimelineEntry"}},
                    "notifications": {"type": "object"}
                }}]},
                "TimelineEntry": {"type": "object", "properties": {
                    "idempotencyKey": {"type": "string"}, "taskId": {"type": "string"}, "version": {"type": "integer"},
                    "kind": {"type": "string", "enum": ["created", "status", "input_required", "answered", "cancel_requested", "degraded", "rerun"]},
                    "status": {"$ref": "#/components/schemas/Status"}, "occurredAt": {"type": "string", "format": "date-time"}
                }},
                "AuditPage": {"type": "object", "properties": {"events": {"type": "array", "items": {"type": "object", "properties": {
                    "at": {"type": "string", "format": "date-time"}, "callId": {"type": ["string", "null"]}, "principal": {"type": ["string", "null"]},
                    "face": {"type": "string", "enum": ["rust", "api", "cli", "mcp"]}, "server": {"type": "string"}, "tool": {"type": "string"},
                    "driver": {"type": "string"}, "outcome": {"type": "string"}, "errorClass": {"type": ["string", "null"]}, "durationMs": {"type": "integer"}}}},
                    "nextCursor": {"type": ["string", "null"]}}},
                "TaskList": {"type": "object", "properties": {"tasks": {"type": "array", "items": {"$ref": "#/components/schemas/TaskSummary"}}, "nextCursor": {"type": ["string", "null"]}}},
                "Answers": {"type": "object", "required": ["answers"], "additionalProperties": false, "properties": {"answers": {"type": "object", "additionalProperties": {"type": "object"}, "description": "input key -> response (e.g. {\"action\": \"accept\", \"content\": {...}})"}}},
                "AnswerResult": {"type": "object", "properties": {"stored": {"type": "array", "items": {"type": "string"}}, "ignored": {"type": "array", "items": {"type": "string"}}}},
                "Call": {"type": "object", "required": ["server", "tool"], "additionalProperties": false, "properties": {
                    "server": {"type": "string"}, "tool": {"type": "string"}, "arguments": {"type": "object"},
                    "conversation": {"type": "string"}, "callId": {"type": "string"}, "correlation": {},
                    "principal": {"type": "string", "description": "Operators may name any principal; a principal token may only name its own (403 otherwise)"}, "waitMs": {"type": "integer", "minimum": 0, "maximum": 300000},
                    "inputResponses": {"type": "object", "additionalProperties": {"type": "object"}, "description": "Answers, by input key, to the questions a 409 input_needed named (details.inputRequests); each is checked against its question (400 invalid_answer naming the field) and relayed when the server asks it"},
                    "requestState": {"type": "string", "description": "The requestState of the 409 being answered, given back unchanged"},
                    "background": {"type": "boolean", "description": "true: keep the call as a task whatever the tool (a synchronous tool runs as durable work with its progress as status); false: the synchronous answer where the tool has one; absent: the server's background list decides"}
                }},
                "CallOutcome": {"type": "object", "properties": {"outcome": {"type": "string", "enum": ["completed", "task"]}, "result": {}, "task": {"$ref": "#/components/schemas/TaskDetail"}}},
                "Tools": {"type": "object", "required": ["server", "tools"], "properties": {"server": {"type": "string"}, "tools": {"type": "array", "items": {"type": "object", "required": ["name", "inputSchema"], "properties": {
                    "name": {"type": "string"}, "title": {"type": ["string", "null"]}, "description": {"type": ["string", "null"]},
                    "inputSchema": {"type": "object", "description": "JSON Schema of the arguments"}, "outputSchema": {"type": ["object", "null"]}, "annotations": {"type": ["object", "null"]}
                }}}}},
                "Servers": {"type": "object", "properties": {"servers": {"type": "array", "items": {"type": "object"}}}},
                "ConfigInForce": {"type": "object", "properties": {"fingerprint": {"type": "object",
                    "description": "The configuration in force as a reload compares it: servers (endpoint, endpoint_hash, settings_hash), auth, tokens (short hash -> principal), issuers, public_url, policy, limits, webhooks, at_start; secrets appear as short hashes only"}}},
                "DeadLetters": {"type": "object", "properties": {
                    "count": {"type": "integer"},
                    "targets": {"type": "array", "items": {"type": "string"}},
                    "deadLetters": {"type": "array", "items": {"type": "object", "properties": {
                        "taskId": {"type": "string"}, "version": {"type": "integer"}, "idempotencyKey": {"type": "string"},
                        "target": {"type": "string"}, "error": {"type": "string"}, "deadAt": {"type": "string", "format": "date-time"}}}}}},
                "Redrive": {"type": "object", "additionalProperties": false, "properties": {
                    "task": {"type": "string"}, "target": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 10000}}},
                "RedriveResult": {"type": "object", "properties": {"redriven": {"type": "integer"}, "remaining": {"type": "integer"}}}
            }
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/tasks": {"get": {
                "summary": "List tracked tasks, newest first",
                "parameters": [
                    {"name": "status", "in": "query", "schema": {"$ref": "#/components/schemas/Status"}},
                    {"name": "outcome", "in": "query", "description": "how the call ended: `tool_error` is a completed call whose tool said it failed (isError), `completed` one that did not", "schema": {"type": "string", "enum": ["completed", "tool_error", "failed", "cancelled"]}},
                    {"name": "server", "in": "query", "schema": {"type": "string"}},
                    {"name": "principal", "in": "query", "schema": {"type": "string"}, "description": "Operators may filter by any principal; a principal token may only name its own (403 otherwise)"},
                    {"name": "conversation", "in": "query", "schema": {"type": "string"}},
                    {"name": "tool", "in": "query", "schema": {"type": "string"}, "description": "the tool's name on its server"},
                    {"name": "since", "in": "query", "schema": {"type": "string", "format": "date-time"}, "description": "calls made at or after this time"},
                    {"name": "until", "in": "query", "schema": {"type": "string", "format": "date-time"}, "description": "calls made before this time"},
                    {"name": "active", "in": "query", "schema": {"type": "boolean"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}},
                    {"name": "cursor", "in": "query", "schema": {"type": "string"}, "description": "nextCursor of the previous page"}
                ],
                "responses": with(json!({"200": ok("A page of tasks", "TaskList"), "403": error_response("A principal token named another principal")}))
            }},
            "/api/v1/audit": {"get": {
                "summary": "The audit trail: every call's end and every refusal, newest first (no arguments or results)",
                "parameters": [
                    {"name": "principal", "in": "query", "schema": {"type": "string"}, "description": "Operators may filter by any principal; a principal token sees only its own entries and may only name itself (403 otherwise)"},
                    {"name": "server", "in": "query", "schema": {"type": "string"}},
                    {"name": "tool", "in": "query", "schema": {"type": "string"}},
                    {"name": "outcome", "in": "query", "schema": {"type": "string", "enum": ["completed", "tool_error", "failed", "cancelled", "refused_policy", "refused_limit"]}},
                    {"name": "since", "in": "query", "schema": {"type": "string", "format": "date-time"}, "description": "entries at or after this time"},
                    {"name": "until", "in": "query", "schema": {"type": "string", "format": "date-time"}, "description": "entries before this time"},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}},
                    {"name": "cursor", "in": "query", "schema": {"type": "string"}, "description": "nextCursor of the previous page"}
                ],
                "responses": with(json!({"200": ok("A page of the audit trail", "AuditPage"), "403": error_response("A principal token named another principal")}))
            }},
            "/api/v1/tasks/{id}": {"get": {
                "summary": "One task: snapshot, result, error, input requests, timeline",
                "parameters": [task_id_param()],
                "responses": with(json!({"200": ok("The task", "TaskDetail"), "404": error_response("Unknown task (or another principal's)")}))
            }},
            "/api/v1/tasks/{id}/cancel": {"post": {
                "summary": "Request cancellation (durable; the server decides the final status)",
                "parameters": [task_id_param()],
                "responses": with(json!({"202": ok("Cancellation recorded", "TaskDetail"), "404": error_response("Unknown task")}))
            }},
            "/api/v1/tasks/{id}/answers": {"post": {
                "summary": "Answer outstanding input requests (each key once)",
                "description": "Each answer is checked against its request before anything is stored: an elicitation's accepted `content` must fill its `requestedSchema` (types, required fields, enum choices, bounds, formats; no fields the form lacks). If any answer does not fit, nothing is stored and the reply is 400 with code `invalid_answer`, a message naming the key and field, and `details` {key, field, reason}. Keys not asked, or already answered, are listed in `ignored`.",
                "parameters": [task_id_param()],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Answers"}}}},
                "responses": answer_responses
            }},
            "/api/v1/calls": {"post": {
                "summary": "Call a tool; returns its result, or the call kept as a task",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Call"}}}},
                "responses": with(json!({
                    "200": ok("Completed synchronously", "CallOutcome"),
                    "202": ok("A task is tracked", "CallOutcome"),
                    "403": error_response("A principal token named another principal"),
                    "404": error_response("Unknown server"),
                    "400": error_response("Bad input, or an inputResponses answer that does not fit its question (invalid_answer)"),
                    "409": error_response("The tool needs input before it starts: details.inputRequests; call again with inputResponses"),
                    "413": error_response("Body too large"),
                    "502": error_response("The remote server failed or broke the protocol"),
                    "503": error_response("busy: the call runtime takes no more calls now (Retry-After)")
                }))
            }},
            "/api/v1/servers": {"get": {"summary": "Configured servers and their health (`ready`: its tools were listed, so the front offers them; `retired`: removed by a reload, its live tasks still followed). Operators see transports, hashes, last errors and OAuth state; other principals see names, readiness and health states only", "responses": with(json!({"200": ok("Servers", "Servers")}))}},
            "/api/v1/config": {"get": {
                "summary": "The configuration in force, as a reload (SIGHUP) compares it (operator token); `mcptask config check --gateway` diffs a file against it",
                "responses": with(json!({"200": ok("Its fingerprint", "ConfigInForce"), "403": error_response("Not an operator token")}))
            }},
            "/api/v1/servers/{name}/tools": {"get": {
                "summary": "The tools a configured server offers (tools/list, every page), with their input schemas",
                "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}, "description": "Server name from mcptask.toml"}],
                "responses": with(json!({
                    "200": ok("The server's tools", "Tools"),
                    "404": error_response("Unknown server (details.servers lists the configured ones)"),
                    "502": error_response("The server could not be reached or answered badly; the message names the cause")
                }))
            }},
            "/api/v1/dead-letters": {"get": {
                "summary": "Events a notify target gave up on, newest first (operator token)",
                "parameters": [
                    {"name": "task", "in": "query", "schema": {"type": "string"}},
                    {"name": "target", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}
                ],
                "responses": with(json!({"200": ok("Dead letters, their total count and the target names", "DeadLetters"), "403": error_response("Not an operator token")}))
            }},
            "/api/v1/dead-letters/redrive": {"post": {
                "summary": "Deliver dead letters again with a fresh retry budget (operator token)",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Redrive"}}}},
                "responses": with(json!({"200": ok("How many were redriven and how many remain", "RedriveResult"), "403": error_response("Not an operator token")}))
            }},
            "/api/v1/events": {"get": {
                "summary": "Server-Sent Events: `task` (summary on change), `event` (timeline entries as delivered)",
                "description": "EventSource cannot send headers: pass the token as ?access_token=.",
                "parameters": [{"name": "access_token", "in": "query", "schema": {"type": "string"}}],
                "responses": with(json!({"200": {"description": "text/event-stream", "content": {"text/event-stream": {}}}}))
            }},
            "/metrics": {"get": {"summary": "Prometheus metrics (operators and the principals of `[api] metrics_principals`; others get 403)", "responses": with(json!({"200": {"description": "Prometheus text format", "content": {"text/plain": {}}}}))}},
            "/healthz": {"get": {"summary": "Liveness", "security": [], "responses": {"200": {"description": "ok"}}}},
            "/readyz": {"get": {"summary": "Readiness: the store answers, every migration is applied and the gateway is not stopping", "security": [], "responses": {"200": {"description": "ready, with how many upstream servers answer and how many are not ready, their tools not listed yet (`ready (upstream servers answering: N of M; not ready (tools not listed yet): K)`; `GET /api/v1/servers` says which)"}, "503": error_response("not_ready: the store is unreachable, or migrations are pending; draining: the gateway is stopping (SIGTERM)")}}},
            "/.well-known/oauth-protected-resource": {"get": {"summary": "OAuth protected resource metadata (RFC 9728), with [[api.oauth]] configured", "security": [], "responses": {"200": {"description": "The metadata"}, "404": error_response("OAuth is not configured")}}},
            "/.well-known/oauth-protected-resource/mcp": {"get": {"summary": "The same, at the path of the MCP endpoint (RFC 9728 §3.1)", "security": [], "responses": {"200": {"description": "The metadata"}, "404": error_response("OAuth is not configured")}}},
            "/openapi.json": {"get": {"summary": "This document", "security": [], "responses": {"200": {"description": "OpenAPI 3.1"}}}},
            "/": {"get": {"summary": "The dashboard (HTML)", "security": [], "responses": {"200": {"description": "text/html"}}}}
        }
    });
    console(&mut doc, &with);
    let summary = &mut doc["components"]["schemas"]["TaskSummary"]["properties"];
    summary["driver"] = json!({"type": "string", "enum": drivers.iter().map(|d| d.as_str()).collect::<Vec<_>>(),
        "description": drivers.iter().map(|d| format!("{}: {}", d.as_str(), d.describe())).collect::<Vec<_>>().join("; ")});
    summary["face"] = json!({"type": ["string", "null"], "enum": faces.iter().map(|f| Some(f.as_str())).chain([None]).collect::<Vec<_>>(),
        "description": "The face that made the call (rust, api, cli, mcp); null for calls made before faces were recorded"});
    doc
}

/// The console's routes (`servers/stats`, `policy`) and their schemas
/// (apart: one `json!` of the whole document would pass the macro's
/// recursion limit).
fn console(doc: &mut Value, with: &dyn Fn(Value) -> Value) {
    let schemas = json!({
                "Numbers": {"type": "object", "properties": {
                    "calls": {"type": "integer", "description": "audit entries in the window: calls that ended and refusals"},
                    "callsPerSecond": {"type": "number"},
                    "errors": {"type": "integer", "description": "calls that failed or returned a tool error"},
                    "refused": {"type": "integer", "description": "calls refused by policy or limits (nothing reached the server)"},
                    "errorRate": {"type": ["number", "null"], "description": "errors / calls that reached the server (null: none did)"},
                    "p50Ms": {"type": ["integer", "null"]}, "p99Ms": {"type": ["integer", "null"]},
                    "outcomes": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "series": {"type": "object", "description": "per bucket (bucketSeconds), oldest first", "properties": {
                        "calls": {"type": "array", "items": {"type": "integer"}}, "errors": {"type": "array", "items": {"type": "integer"}}}}
                }},
                "ServerStats": {"type": "object", "properties": {
                    "since": {"type": "string", "format": "date-time"}, "windowSeconds": {"type": "integer"}, "bucketSeconds": {"type": "integer"},
                    "coveredSeconds": {"type": "number", "description": "the time the numbers cover: the window, or less when sampled"},
                    "sampled": {"type": "boolean", "description": "the window held more entries than sampleLimit: the numbers cover the newest sampleLimit"},
                    "sampleLimit": {"type": "integer"},
                    "servers": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/Numbers"}, {"type": "object", "properties": {
                        "name": {"type": "string"},
                        "state": {"type": "string", "enum": ["ok", "degraded", "down", "unknown"], "description": "down: its last exchange failed; degraded: at least 10% of its calls in the window failed or returned a tool error; unknown: not contacted yet"},
                        "reason": {"type": ["string", "null"], "description": "why it is not ok (an upstream's error text for operators only)"},
                        "lastOkAt": {"type": ["string", "null"], "format": "date-time"}, "lastErrorAt": {"type": ["string", "null"], "format": "date-time"},
                        "tools": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/Numbers"}, {"type": "object", "properties": {"name": {"type": "string"}}}]}}
                    }}]}}
                }},
                "AdminServer": {"type": "object", "properties": {
                    "name": {"type": "string"}, "origin": {"type": "string", "enum": ["file", "api"]},
                    "shadowed_by_file": {"type": "boolean"},
                    "in_force": {"type": "boolean", "description": "origin api: whether this gateway has put it in force (false while the file shadows it, or when it could not be applied: the log says why)"},
                    "changed_by": {"type": "string"},
                    "changed_at": {"type": "string", "format": "date-time"},
                    "definition": {"type": "object", "description": "the stored [[servers]] keys (origin api only)"}}},
                "AdminServers": {"type": "object", "properties": {"servers": {"type": "array", "items": {"$ref": "#/components/schemas/AdminServer"}}}},
                "AdminVirtualServers": {"type": "object", "properties": {"virtual_servers": {"type": "array", "items": {"$ref": "#/components/schemas/AdminServer"}}}},
                "AdminChange": {"type": "object", "properties": {
                    "name": {"type": "string"}, "applied": {"type": "boolean"},
                    "not_applied": {"type": ["string", "null"], "description": "why this replica has not put the stored change in force yet"},
                    "changes": {"type": "array", "items": {"type": "string"}, "description": "what the reload here changed"}}},
                "PolicyInForce": {"type": "object", "properties": {
                    "tools": {"type": "array", "items": {"type": "object", "properties": {"server": {"type": "string"}, "tool": {"type": "string"}}}},
                    "callers": {"type": "array", "items": {"type": "object", "properties": {
                        "principal": {"type": ["string", "null"], "description": "null: operator tokens"}, "label": {"type": "string"},
                        "allowed": {"type": "array", "items": {"type": "boolean"}, "description": "one per entry of tools, in order"}}}},
                    "rules": {"description": "the [[policy]] rules in order (operators only; null otherwise)"},
                    "unrestricted": {"type": "boolean", "description": "no rules: every caller may call every tool"}
                }}
    });
    let paths = json!({
            "/api/v1/servers/stats": {"get": {
                "summary": "Each configured server's condition (ok, degraded, down with the reason) and recent numbers: calls/s, p50/p99 latency, error rate, a per-minute series, per tool",
                "description": "Computed from the audit trail (every replica's calls): one indexed read of at most sampleLimit of the window's newest entries, whatever the number of calls stored. Operators see every caller's calls; a principal token its own.",
                "parameters": [{"name": "minutes", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 60, "default": 15}, "description": "the window"}],
                "responses": with(json!({"200": ok("Servers and their numbers", "ServerStats")}))
            }},
            "/api/v1/admin/servers": {"get": {
                "summary": "Every server in force with its origin (file or api), and the servers set through the admin API, with who set them and when (operators only)",
                "description": "A stored server whose name the file also defines is listed twice: origin file (in force) and origin api with shadowed_by_file true (the file wins).",
                "responses": with(json!({"200": ok("The servers", "AdminServers"), "403": error_response("Not an operator token")}))
            }},
            "/api/v1/admin/servers/{name}": {
                "get": {
                    "summary": "One server as the admin listing shows it (operators only)",
                    "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": with(json!({"200": ok("The server", "AdminServer"), "403": error_response("Not an operator token"), "404": error_response("No such server")}))
                },
                "put": {
                    "summary": "Add a server, or replace one set through the admin API: checked with the file as one configuration, stored in the database, applied by every replica (operators only)",
                    "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object",
                        "description": "The server's [[servers]] keys (url or command, headers, args, env, prefix, timeouts, …); null leaves a key out"}}}},
                    "responses": with(json!({
                        "200": ok("Stored, and what applying it here changed", "AdminChange"),
                        "400": error_response("invalid_config: the configuration file's own message for this definition; not_settable: a key that makes the gateway run a program or read its own files or environment (command, args, env, cwd, oauth, identity); nothing was stored"),
                        "403": error_response("Not an operator token"),
                        "409": error_response("defined_in_file: the configuration file defines this server, and the file wins")
                    }))
                },
                "delete": {
                    "summary": "Delete a server set through the admin API (operators only)",
                    "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": with(json!({
                        "200": ok("Deleted, and what applying it here changed", "AdminChange"),
                        "400": error_response("invalid_config: the configuration without it is not valid (e.g. a virtual server names it)"),
                        "403": error_response("Not an operator token"),
                        "404": error_response("No server of that name was set through the admin API"),
                        "409": error_response("defined_in_file: the configuration file defines this server")
                    }))
                }
            },
            "/api/v1/admin/virtual_servers": {"get": {
                "summary": "Every virtual server in force with its origin (file or api), and those set through the admin API, with who set them and when (operators only)",
                "description": "Listed as /api/v1/admin/servers lists servers, under the key virtual_servers; a stored one whose name the file also defines is shadowed (the file wins).",
                "responses": with(json!({"200": ok("The virtual servers", "AdminVirtualServers"), "403": error_response("Not an operator token")}))
            }},
            "/api/v1/admin/virtual_servers/{name}": {
                "get": {
                    "summary": "One virtual server as the admin listing shows it (operators only)",
                    "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": with(json!({"200": ok("The virtual server", "AdminServer"), "403": error_response("Not an operator token"), "404": error_response("No such virtual server")}))
                },
                "put": {
                    "summary": "Add a virtual server (served at /mcp/{name}), or replace one set through the admin API: checked with the file as one configuration, stored in the database, applied by every replica (operators only)",
                    "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object",
                        "description": "Its [[virtual_servers]] keys: tools, prompts, resources (\"server/name\" globs), principals (globs); null leaves a key out"}}}},
                    "responses": with(json!({
                        "200": ok("Stored, and what applying it here changed", "AdminChange"),
                        "400": error_response("invalid_config: the configuration file's own message for this definition; nothing was stored"),
                        "403": error_response("Not an operator token"),
                        "409": error_response("defined_in_file: the configuration file defines this virtual server, and the file wins")
                    }))
                },
                "delete": {
                    "summary": "Delete a virtual server set through the admin API (operators only)",
                    "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": with(json!({
                        "200": ok("Deleted, and what applying it here changed", "AdminChange"),
                        "403": error_response("Not an operator token"),
                        "404": error_response("No virtual server of that name was set through the admin API"),
                        "409": error_response("defined_in_file: the configuration file defines this virtual server")
                    }))
                }
            },
            "/api/v1/policy": {"get": {
                "summary": "Which caller may call which tool under the policy in force ([[policy]]), over the tools listed now",
                "description": "Operators see the operator tokens and every principal of [[api.tokens]], and the rules; a principal token sees only itself (judged with its own scopes and claims) and only the tools it may call.",
                "responses": with(json!({"200": ok("The tools and who may call each", "PolicyInForce")}))
            }}
    });
    for (section, parts) in [("components", schemas), ("paths", paths)] {
        let target = if section == "components" {
            &mut doc["components"]["schemas"]
        } else {
            &mut doc["paths"]
        };
        for (k, v) in parts.as_object().expect("an object") {
            target[k] = v.clone();
        }
    }
}

/// `GET /openapi.json`: [`spec`] as the response.
pub async fn document() -> Json<Value> {
    Json(spec())
}
