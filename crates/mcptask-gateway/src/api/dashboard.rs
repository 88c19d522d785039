//! The dashboard: one self-contained HTML page (no build step, no assets
//! fetched from the internet) that talks to the API and its event stream.

use axum::response::Html;

const PAGE: &str = include_str!("dashboard.html");

pub async fn page() -> Html<&'static str> {
    Html(PAGE)
}
