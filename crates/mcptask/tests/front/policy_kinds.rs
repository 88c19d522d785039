//! Policy and fair limits for every request kind the front relays, not
//! tools only: a principal denied a server whole (`"priv/*"`) finds none of
//! its prompts, resources or templates in its lists, and its `prompts/get`,
//! `resources/read` and `completion/complete` of them are refused exactly
//! as those of names that do not exist, while another principal uses them;
//! the task ids of a principal stay its own; and a principal over its rate
//! is refused prompts and resources as it is refused calls.

use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient, error_code};
use mcptask_testkit::{
    ALICE, BOB, DemoServer, GatewayProcess, GatewaySpec, TestDatabase, with_deadline,
};
use rmcp::model::{
    ArgumentInfo, CompleteRequestParams, GetPromptRequestParams, GetPromptResponse,
    ReadResourceRequestParams, ReadResourceResponse, Reference,
};
use rmcp::service::ServiceError;
use serde_json::json;

/// The demo server as `priv` behind a front with static tokens (alice,
/// bob) and `extra` TOML.
async fn front(
    db: &TestDatabase,
    front_db: &TestDatabase,
    extra: &str,
) -> (DemoServer, GatewayProcess) {
    let server = DemoServer::start(&db.url, &[]).await;
    let spec = GatewaySpec::with_tokens(&front_db.url, &[("priv", &server.url)]);
    let toml = spec.toml() + "\n[proxy]\nenabled = true\n" + extra;
    let gateway = GatewayProcess::start_toml("front with a policy", &toml, &[]).await;
    (server, gateway)
}

async fn connect(gateway: &GatewayProcess, token: &str) -> TestClient {
    TestClient::http(
        &format!("{}/mcp", gateway.base),
        Some(token),
        Lifecycle::Modern { tasks: true },
    )
    .await
    .expect("connect to the front")
}

/// The front's prompt names `client` is shown.
async fn prompt_names(client: &TestClient) -> Vec<String> {
    client
        .peer()
        .list_all_prompts()
        .await
        .expect("prompts/list")
        .into_iter()
        .map(|p| p.name)
        .collect()
}

/// Until `ready` is shown priv's prompts (the front meets its servers in
/// the background).
async fn wait_listed(ready: &TestClient) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !prompt_names(ready)
        .await
        .contains(&"priv__test_simple_prompt".to_string())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "priv never listed its prompts"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An error as a caller can tell it apart: its code and its words, the
/// name it was about put aside.
fn shape(e: &ServiceError, name: &str) -> (Option<i32>, String) {
    (error_code(e), e.to_string().replace(name, "X"))
}

/// `refused` (about `hidden`) reads exactly as `missing` (about `unknown`).
fn same_refusal(
    what: &str,
    refused: Result<impl std::fmt::Debug, ServiceError>,
    hidden: &str,
    missing: Result<impl std::fmt::Debug, ServiceError>,
    unknown: &str,
) {
    let refused = refused.expect_err(&format!("{what} of a denied item is refused"));
    let missing = missing.expect_err(&format!("{what} of an unknown item is refused"));
    assert_eq!(
        shape(&refused, hidden),
        shape(&missing, unknown),
        "{what}: {refused} / {missing}"
    );
}

fn complete(reference: Reference, argument: &str, value: &str) -> CompleteRequestParams {
    CompleteRequestParams::new(reference, ArgumentInfo::new(argument, value))
}

const TEMPLATE: &str = "test://template/{id}/data";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_servers_prompts_resources_and_completions_read_as_unknown() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(Duration::from_secs(180), async {
        let policy = "\n[[policy]]\nprincipal = \"alice\"\ndeny = [\"priv/*\"]\n";
        let (_server, gateway) = front(&db, &front_db, policy).await;
        let bob = connect(&gateway, BOB).await;
        wait_listed(&bob).await;
        let alice = connect(&gateway, ALICE).await;

        // Lists: bob's have priv's items, alice's none.
        let alices = prompt_names(&alice).await;
        assert!(alices.is_empty(), "alice is shown {alices:?}");
        let uris = |client: &TestClient| {
            let peer = client.peer().clone();
            async move {
                let resources = peer.list_all_resources().await.expect("resources/list");
                let templates = peer
                    .list_all_resource_templates()
                    .await
                    .expect("resources/templates/list");
                (
                    resources
                        .into_iter()
                        .map(|r| r.uri.clone())
                        .collect::<Vec<_>>(),
                    templates
                        .into_iter()
                        .map(|t| t.uri_template.clone())
                        .collect::<Vec<_>>(),
                )
            }
        };
        let (resources, templates) = uris(&bob).await;
        assert!(
            resources.contains(&"test://static-text".to_string()),
            "{resources:?}"
        );
        assert_eq!(templates, [TEMPLATE], "{templates:?}");
        let (resources, templates) = uris(&alice).await;
        assert!(
            resources.is_empty() && templates.is_empty(),
            "alice is shown {resources:?} {templates:?}"
        );

        // Alice: each of priv's items is refused exactly as one that does
        // not exist.
        let peer = alice.peer();
        let get = |name: &str| peer.get_prompt_once(GetPromptRequestParams::new(name));
        same_refusal(
            "prompts/get",
            get("priv__test_simple_prompt").await,
            "priv__test_simple_prompt",
            get("priv__no_such_prompt").await,
            "priv__no_such_prompt",
        );
        let read = |uri: &str| peer.read_resource_once(ReadResourceRequestParams::new(uri));
        same_refusal(
            "resources/read",
            read("test://static-text").await,
            "test://static-text",
            read("test://no-such-resource").await,
            "test://no-such-resource",
        );
        same_refusal(
            "resources/read of a template's URI",
            read("test://template/7/data").await,
            "test://template/7/data",
            read("test://no-such-resource").await,
            "test://no-such-resource",
        );
        let prompt_ref = |name: &str| complete(Reference::for_prompt(name), "arg1", "he");
        same_refusal(
            "completion/complete of a prompt",
            peer.complete(prompt_ref("priv__test_prompt_with_arguments"))
                .await,
            "priv__test_prompt_with_arguments",
            peer.complete(prompt_ref("priv__no_such_prompt")).await,
            "priv__no_such_prompt",
        );
        let template_ref = |uri: &str| complete(Reference::for_resource(uri), "id", "1");
        same_refusal(
            "completion/complete of a template",
            peer.complete(template_ref(TEMPLATE)).await,
            TEMPLATE,
            peer.complete(template_ref("test://nowhere/{id}")).await,
            "test://nowhere/{id}",
        );

        // Bob uses them all.
        let peer = bob.peer();
        let got = peer
            .get_prompt_once(GetPromptRequestParams::new("priv__test_simple_prompt"))
            .await
            .expect("bob's prompts/get");
        assert!(matches!(got, GetPromptResponse::Complete(_)), "{got:?}");
        for uri in ["test://static-text", "test://template/7/data"] {
            let read = peer
                .read_resource_once(ReadResourceRequestParams::new(uri))
                .await
                .unwrap_or_else(|e| panic!("bob's resources/read {uri}: {e}"));
            assert!(
                matches!(read, ReadResourceResponse::Complete(_)),
                "{read:?}"
            );
        }
        let values = peer
            .complete(prompt_ref("priv__test_prompt_with_arguments"))
            .await
            .expect("bob's completion of a prompt argument")
            .completion
            .values;
        assert_eq!(values, ["hello", "help"]);
        let values = peer
            .complete(template_ref(TEMPLATE))
            .await
            .expect("bob's completion of a template variable")
            .completion
            .values;
        assert_eq!(values, ["1", "123"]);

        // A task stays its principal's: bob's task id is, to alice, a task
        // that does not exist, at every tasks method.
        let id = bob
            .start_task("priv__slow_compute", json!({"seconds": 30}))
            .await;
        let unknown = "no-such-task-0";
        let (theirs, none) = (alice.get(&id).await, alice.get(unknown).await);
        same_refusal("tasks/get", theirs, &id, none, unknown);
        let (theirs, none) = (alice.cancel(&id).await, alice.cancel(unknown).await);
        same_refusal("tasks/cancel", theirs, &id, none, unknown);
        let answers = json!({"x": {"action": "accept", "content": {}}});
        let (theirs, none) = (
            alice.update(&id, answers.clone()).await,
            alice.update(unknown, answers).await,
        );
        same_refusal("tasks/update", theirs, &id, none, unknown);
        bob.cancel(&id).await.expect("bob cancels his own task");
    })
    .await;
}

/// A principal over its rate is refused `prompts/list`, `prompts/get`,
/// `resources/read` and `completion/complete` with the busy error calls
/// get, while another principal's requests all pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_over_its_rate_is_refused_prompts_and_resources_too() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(Duration::from_secs(180), async {
        // One request every 100 s after a burst of 2: alice's third is
        // refused, whatever its kind.
        let limits = "\n[limits]\nper_principal_rate = 0.01\nper_principal_burst = 2\n";
        let (_server, gateway) = front(&db, &front_db, limits).await;
        // Until priv answers (tools/list is the front's own catalog, read
        // without spending anything).
        let operator = connect(&gateway, mcptask_testkit::OPERATOR).await;
        let tools = operator.tools_once_listed("priv__greet").await;
        assert!(tools.contains(&"priv__greet".to_string()), "{tools:?}");

        let alice = connect(&gateway, ALICE).await;
        let peer = alice.peer();
        assert!(!prompt_names(&alice).await.is_empty());
        peer.read_resource_once(ReadResourceRequestParams::new("test://static-text"))
            .await
            .expect("alice's second request is within her burst");
        let busy = |e: ServiceError, what: &str| {
            let ServiceError::McpError(data) = &e else {
                panic!("{what}: {e}");
            };
            let reason = data.data.as_ref().map(|d| d["reason"].clone());
            assert_eq!(reason, Some(json!("rate_limited")), "{what}: {e}");
        };
        busy(
            peer.list_all_prompts().await.expect_err("over the rate"),
            "prompts/list",
        );
        busy(
            peer.get_prompt_once(GetPromptRequestParams::new("priv__test_simple_prompt"))
                .await
                .expect_err("over the rate"),
            "prompts/get",
        );
        busy(
            peer.read_resource_once(ReadResourceRequestParams::new("test://static-text"))
                .await
                .expect_err("over the rate"),
            "resources/read",
        );
        busy(
            peer.list_all_resource_templates()
                .await
                .expect_err("over the rate"),
            "resources/templates/list",
        );
        busy(
            peer.complete(complete(Reference::for_resource(TEMPLATE), "id", "1"))
                .await
                .expect_err("over the rate"),
            "completion/complete",
        );

        // Bob's budget is his own.
        let bob = connect(&gateway, BOB).await;
        assert!(!prompt_names(&bob).await.is_empty());
        bob.peer()
            .read_resource_once(ReadResourceRequestParams::new("test://static-text"))
            .await
            .expect("bob is not held back by alice");
    })
    .await;
}
