//! `mcptask conformance-client URL` (hidden): what the official MCP
//! conformance suite runs as "the client" (`conformance client --command
//! "mcptask conformance-client"`). It drives mcptask's own upstream client
//! (`ServerRegistry`, its pooled connection and lanes, the OAuth layer) the
//! way each scenario expects a client to behave.
//!
//! The suite passes the server URL as the last argument, the scenario in
//! `MCP_CONFORMANCE_SCENARIO`, and scenario data (pre-registered client
//! credentials, a private key, tool calls) as JSON in
//! `MCP_CONFORMANCE_CONTEXT`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use async_trait::async_trait;
use mcptask_client::oauth::{
    Grant, IdentityProvider, MemoryTokenStore, OAuthRuntime, OAuthSettings, Secret, SecretKey,
    TokenEndpointAuth, TokenSource, UserAgent,
};
use mcptask_client::remote::Timeouts;
use mcptask_client::upstream::{LaneOptions, SyncEvent, SyncOptions, sync_call};
use mcptask_client::{ServerDef, ServerRegistry};
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

/// The client ID metadata document URL the suite expects (SEP-991).
const CIMD_URL: &str = "https://conformance-test.local/client-metadata.json";
const REDIRECT_URI: &str = "http://localhost:3000/callback";
const SERVER: &str = "conformance";

/// Stands in for the user: follows the authorization URL without
/// redirects and hands back where the authorization server sent the
/// browser (the suite's authorization server approves at once).
struct HeadlessApproval;

#[async_trait]
impl UserAgent for HeadlessApproval {
    async fn approve(&self, _: &str, url: &str, _: &str) -> Result<String, String> {
        let client = mcptask_client::tls::build_http_client(|| {
            reqwest::Client::builder().redirect(reqwest::redirect::Policy::none())
        })
        .map_err(|e| e.to_string())?;
        let response = client
            .get(url)
            .send()
            .await
            .map_err(|e| format!("authorization request: {e}"))?;
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                format!(
                    "the authorization endpoint answered {} without a redirect",
                    response.status()
                )
            })?;
        let base = reqwest::Url::parse(url).map_err(|e| e.to_string())?;
        Ok(base.join(location).map_err(|e| e.to_string())?.to_string())
    }
}

fn settings_for(scenario: &str, context: &Value) -> OAuthSettings {
    let text = |k: &str| context.get(k).and_then(Value::as_str).map(str::to_string);
    let mut settings = OAuthSettings {
        grant: Grant::AuthorizationCode,
        client_metadata_url: Some(CIMD_URL.to_string()),
        client_name: Some("mcptask-conformance-client".to_string()),
        redirect_uri: Some(REDIRECT_URI.to_string()),
        ..OAuthSettings::default()
    };
    match scenario {
        "auth/client-credentials-basic" => {
            settings.grant = Grant::ClientCredentials;
            settings.token_endpoint_auth = Some(TokenEndpointAuth::ClientSecretBasic);
        }
        "auth/client-credentials-jwt" => {
            settings.grant = Grant::ClientCredentials;
            settings.token_endpoint_auth = Some(TokenEndpointAuth::PrivateKeyJwt);
            settings.private_key_pem = text("private_key_pem").map(Secret);
            settings.signing_algorithm = text("signing_algorithm");
        }
        // RFC 9449: a user's authorization, the tokens bound to our key.
        "auth/dpop" | "auth/dpop-nonce" => settings.dpop = true,
        // SEP-1933: the workload's JWT is the grant (only the valid one;
        // the scenario's wrong-audience and expired ones are for clients
        // that test their own error paths).
        "auth/wif-jwt-bearer" => {
            settings.grant = Grant::JwtBearer;
            settings.assertion = text("valid_jwt").map(|t| TokenSource::Value(Secret(t)));
        }
        // SEP-990: the user's ID token, exchanged at the enterprise
        // identity provider for an ID-JAG, buys the token.
        "auth/enterprise-managed-authorization" => {
            settings.grant = Grant::EnterpriseManaged;
            settings.identity_provider = match (
                text("idp_issuer"),
                text("idp_token_endpoint"),
                text("idp_client_id"),
                text("idp_id_token"),
            ) {
                (Some(issuer), Some(token_endpoint), Some(client_id), Some(id_token)) => {
                    Some(IdentityProvider {
                        issuer,
                        token_endpoint,
                        client_id,
                        client_secret: None,
                        id_token: TokenSource::Value(Secret(id_token)),
                    })
                }
                _ => None,
            };
        }
        _ => {}
    }
    settings.client_id = text("client_id");
    settings.client_secret = text("client_secret").map(Secret);
    settings
}

/// Run `scenario` against `url`.
pub async fn run(url: String) -> anyhow::Result<()> {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: Value = match std::env::var("MCP_CONFORMANCE_CONTEXT") {
        Ok(text) => serde_json::from_str(&text).context("MCP_CONFORMANCE_CONTEXT is not JSON")?,
        Err(_) => json!({}),
    };
    let runtime = OAuthRuntime::with_agent(
        Arc::new(MemoryTokenStore::default()),
        SecretKey::generate().map_err(|e| anyhow!("{e}"))?,
        Arc::new(mcptask_client::SystemClock),
        Arc::new(HeadlessApproval),
    );
    let settings = settings_for(&scenario, &context).with_runtime(runtime);
    let registry = ServerRegistry::new();
    registry.upsert(ServerDef::http(SERVER, url).with_oauth(settings));
    let timeouts = Timeouts {
        connect: Duration::from_secs(20),
        call: Duration::from_secs(20),
    };
    let connection = registry
        .connect(SERVER, None, timeouts)
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let tools = connection
        .peer
        .list_all_tools()
        .await
        .map_err(|e| anyhow!("tools/list: {e}"))?;
    tracing::info!(count = tools.len(), "listed tools");
    let calls: Vec<(String, Value)> = match context.get("toolCalls").and_then(Value::as_array) {
        Some(calls) => calls
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default().to_string(),
                    c.get("arguments").cloned().unwrap_or_else(|| json!({})),
                )
            })
            .collect(),
        None => match scenario.as_str() {
            // Only listing is served; the $ref must stay as sent.
            "json-schema-ref-no-deref" | "request-metadata" => Vec::new(),
            "sep-2322-client-request-state" => {
                return request_state_rounds(&registry, timeouts).await;
            }
            // Echo the focal tool's input schema exactly as listed.
            "json-schema-2020-12-preservation" => {
                let focal = tools
                    .iter()
                    .find(|t| t.name == "json_schema_2020_12_tool")
                    .ok_or_else(|| anyhow!("json_schema_2020_12_tool is not listed"))?;
                let schema = Value::Object((*focal.input_schema).clone());
                vec![("json_schema_echo".to_string(), json!({"schema": schema}))]
            }
            _ => tools
                .first()
                .map(|t| {
                    let args = if t.name == "add_numbers" {
                        json!({"a": 2, "b": 3})
                    } else {
                        json!({})
                    };
                    (t.name.to_string(), args)
                })
                .into_iter()
                .collect(),
        },
    };
    for (name, arguments) in calls {
        let result = call(&registry, timeouts, &name, arguments, None, None).await?;
        tracing::info!(tool = %name, ?result, "called");
    }
    // What else the server offers, read once each (every request carries
    // its standard headers, SEP-2243).
    let capabilities = connection.peer.peer_info().map(|i| i.capabilities.clone());
    if capabilities.as_ref().is_some_and(|c| c.resources.is_some()) {
        let resources = connection
            .peer
            .list_all_resources()
            .await
            .map_err(|e| anyhow!("resources/list: {e}"))?;
        for resource in resources {
            let read = rmcp::model::ReadResourceRequestParams::new(resource.uri.clone());
            if let Err(e) = connection.peer.read_resource(read).await {
                tracing::info!(uri = %resource.uri, error = %e, "resources/read refused");
            }
        }
    }
    if capabilities.as_ref().is_some_and(|c| c.prompts.is_some()) {
        let prompts = connection
            .peer
            .list_all_prompts()
            .await
            .map_err(|e| anyhow!("prompts/list: {e}"))?;
        for prompt in prompts {
            let get = rmcp::model::GetPromptRequestParams::new(prompt.name.clone());
            if let Err(e) = connection.peer.get_prompt(get).await {
                tracing::info!(prompt = %prompt.name, error = %e, "prompts/get refused");
            }
        }
    }
    drop(connection);
    Ok(())
}

/// One `tools/call` on a lane of the server, with the answers and state of
/// an earlier input round (SEP-2322) when given.
async fn call(
    registry: &ServerRegistry,
    timeouts: Timeouts,
    name: &str,
    arguments: Value,
    input_responses: Option<rmcp::model::InputResponses>,
    request_state: Option<String>,
) -> anyhow::Result<CallToolResponse> {
    let options = LaneOptions {
        connect_timeout: timeouts.connect,
        call_timeout: timeouts.call,
        ..LaneOptions::default()
    };
    let lane = registry
        .lanes(SERVER, options)
        .map_err(|e| anyhow!("{e}"))?
        .acquire()
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let mut call = sync_call(
        lane,
        name,
        arguments,
        SyncOptions {
            timeout: Some(timeouts.call),
            input_responses,
            request_state,
            ..SyncOptions::default()
        },
    )
    .await
    .map_err(|e| anyhow!("tools/call {name}: {e}"))?;
    while let Some(event) = call.next().await {
        match event {
            SyncEvent::Done(result) => {
                return result.map_err(|e| anyhow!("tools/call {name}: {e}"));
            }
            SyncEvent::Ask(ask) => {
                ask.respond(Ok(
                    json!({"action": "accept", "content": {"confirmed": true}}),
                ));
            }
            SyncEvent::Progress { .. } => {}
        }
    }
    bail!("tools/call {name}: no outcome")
}

/// The answers a user would give to an input round: accept every
/// elicitation, confirming.
fn answers(round: &rmcp::model::InputRequiredResult) -> rmcp::model::InputResponses {
    let requests = serde_json::to_value(&round.input_requests).unwrap_or(Value::Null);
    let mut responses = rmcp::model::InputResponses::new();
    if let Some(map) = requests.as_object() {
        for (key, request) in map {
            let answer = match request["method"].as_str() {
                Some("elicitation/create") => {
                    json!({"action": "accept", "content": {"confirmed": true}})
                }
                Some("roots/list") => json!({"roots": []}),
                _ => json!({"action": "decline"}),
            };
            responses.insert(key.clone(), answer);
        }
    }
    responses
}

/// SEP-2322: answer each input round in a new call carrying the server's
/// `requestState` untouched (and no state where the server sent none); a
/// call unrelated to a pending round carries nothing of it.
async fn request_state_rounds(registry: &ServerRegistry, timeouts: Timeouts) -> anyhow::Result<()> {
    let first = call(
        registry,
        timeouts,
        "test_mrtr_echo_state",
        json!({}),
        None,
        None,
    )
    .await?;
    if let CallToolResponse::InputRequired(round) = first {
        let responses = answers(&round);
        call(
            registry,
            timeouts,
            "test_mrtr_unrelated",
            json!({}),
            None,
            None,
        )
        .await?;
        call(
            registry,
            timeouts,
            "test_mrtr_echo_state",
            json!({}),
            Some(responses),
            round.request_state.clone(),
        )
        .await?;
    }
    let second = call(
        registry,
        timeouts,
        "test_mrtr_no_state",
        json!({}),
        None,
        None,
    )
    .await?;
    if let CallToolResponse::InputRequired(round) = second {
        let responses = answers(&round);
        call(
            registry,
            timeouts,
            "test_mrtr_no_state",
            json!({}),
            Some(responses),
            round.request_state.clone(),
        )
        .await?;
    }
    // A result without resultType is complete: nothing to retry.
    call(
        registry,
        timeouts,
        "test_mrtr_no_result_type",
        json!({}),
        None,
        None,
    )
    .await?;
    Ok(())
}
