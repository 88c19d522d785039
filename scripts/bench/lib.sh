# Shared by the front benchmarks (sourced): a demo-server and `mcptask serve`
# with the front on in front of it, wrk Lua scripts, and raw MCP posts.
# Expects BIN (a release mcptask; DEMO_BIN, if set, runs demo-server instead,
# so that two gateway builds can be compared against the same upstream); sets
# work, demo_port, front_port, gateway_pid, and hop_port/hop_pids by hop name.

command -v wrk >/dev/null || { echo "$0: wrk is not installed (apt-get install wrk)" >&2; exit 1; }
[[ -x "$BIN" ]] || { echo "$0: no binary at $BIN (cargo build --release -p mcptask)" >&2; exit 1; }
DEMO_BIN="${DEMO_BIN:-$BIN}"
[[ -x "$DEMO_BIN" ]] || { echo "$0: no binary at DEMO_BIN=$DEMO_BIN" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 200); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
# CPU time the processes PID... have used (user + system), in clock ticks.
cpu_ticks() { local t=0 p; for p in "$@"; do t=$(( t + $(awk '{print $14 + $15}' "/proc/$p/stat") )); done; echo "$t"; }

start_demo() {
  demo_port=$(port)
  "$DEMO_BIN" demo-server --http "127.0.0.1:$demo_port" --database-url "sqlite:$work/demo.db" 2>"$work/demo.log" &
  demo_pid=$!
  pids+=($demo_pid)
  wait_port "$demo_port"
}

# start_gateway [API_TOML] [EXTRA_TOML]: the front (prefix "") before the demo
# server, run from BIN; sets front_port and gateway_pid.
start_gateway() {
  start_gateway_as front "$BIN" "$@"
  front_port=${hop_port[front]}
  gateway_pid=${hop_pids[front]}
}

# Every hop before the demo server, by name: its port, and the processes whose
# CPU it spends (nginx's master and workers; a gateway's one process).
declare -A hop_port=() hop_pids=()

# start_gateway_as NAME BIN [API_TOML] [EXTRA_TOML]: one more gateway, from
# BIN, with its own database and configuration (to run two builds side by side
# before the same upstream).
start_gateway_as() {
  local name=$1 bin=$2 api=${3:-'auth = "none"'} extra=${4:-}
  local p
  p=$(port)
  cat >"$work/$name.toml" <<TOML
[database]
url = "sqlite:$work/$name.db"

[api]
listen = "127.0.0.1:$p"
$api

[proxy]
enabled = true

[[servers]]
name = "demo"
url = "http://127.0.0.1:$demo_port/mcp"
prefix = ""

$extra
TOML
  RUST_LOG=warn "$bin" serve --config "$work/$name.toml" 2>"$work/$name.log" &
  pids+=($!)
  hop_port[$name]=$p
  hop_pids[$name]=$!
  wait_port "$p"
}

# start_nginx: nginx as a plain reverse proxy before the demo server, the
# way a team would put one there (HTTP/1.1 and kept-alive connections to the
# upstream, no buffering, so SSE answers stream): the bare hop the front is
# measured against. Its workers are its own (`worker_processes auto`).
start_nginx() {
  command -v nginx >/dev/null || { echo "$0: nginx is not installed (apt-get install nginx)" >&2; exit 1; }
  local p
  p=$(port)
  mkdir -p "$work/nginx"
  cat >"$work/nginx/nginx.conf" <<NGINX
daemon off;
worker_processes auto;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  upstream demo { server 127.0.0.1:$demo_port; keepalive 64; }
  server {
    listen 127.0.0.1:$p;
    location / {
      proxy_pass http://demo;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host 127.0.0.1:$demo_port;
      proxy_buffering off;
    }
  }
}
NGINX
  nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" 2>"$work/nginx/start.log" &
  local master=$!
  pids+=($master)
  hop_port[nginx]=$p
  wait_port "$p"
  # The master listens before it forks its workers: wait for them.
  local workers=""
  for _ in $(seq 1 100); do
    workers=$(pgrep -P "$master" | tr '\n' ' ')
    [[ -n "$workers" ]] && break
    sleep 0.1
  done
  hop_pids[nginx]="$master $workers"
}

meta='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"wrk","version":"0"},"io.modelcontextprotocol/clientCapabilities":{CAPS}}'
plain_meta=${meta/CAPS/}
tasks_meta=${meta/CAPS/\"extensions\":\{\"io.modelcontextprotocol/tasks\":\{\}\}}
greet_body='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greet","arguments":{"name":"bench"},'"$plain_meta"'}}'
# create_body SECONDS: a slow_compute task, tasks declared.
create_body() { echo '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow_compute","arguments":{"seconds":'"$1"'},'"$tasks_meta"'}}'; }

# lua FILE METHOD NAME BODY [TOKEN]: a wrk script that POSTs BODY with the
# request's routing headers and prints its summary on one RESULT line.
lua() {
  local name="" auth=""
  [[ -n "$3" ]] && name="wrk.headers[\"Mcp-Name\"] = \"$3\""
  [[ -n "${5:-}" ]] && auth="wrk.headers[\"Authorization\"] = \"Bearer $5\""
  cat >"$1" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "$2"
$name
$auth
wrk.body = [[$4]]
done = function(summary, latency, requests)
  io.write(string.format("RESULT %d %d %.0f %.3f %.3f\n", summary.requests, summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout, summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
LUA
}

# post PORT METHOD NAME BODY: one raw MCP request; prints the answer.
post() {
  curl -s -X POST "http://127.0.0.1:$1/mcp" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
    -H "Mcp-Method: $2" ${3:+-H "Mcp-Name: $3"} --data "$4"
}
