//! A minimal WebDriver client for Debian's chromium over chromedriver, for the console's tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

use super::ChildGuard;

/// A minimal WebDriver client (W3C protocol over HTTP+JSON) for chromedriver.
pub struct Driver {
    base: String,
    session: String,
    _process: ChildGuard,
}

impl Driver {
    pub fn start() -> Option<Driver> {
        let chromedriver = ["/usr/bin/chromedriver"]
            .into_iter()
            .find(|p| Path::new(p).exists())?;
        let port = super::free_port();
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut guard = ChildGuard::new(child, "chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        guard.wait_until(Duration::from_secs(30), "listens", |_| {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--window-size=1280,800", "--disable-dev-shm-usage"]
            },
            "goog:loggingPrefs": { "browser": "ALL" }
        }}});
        let r = post(&format!("{base}/session"), &caps);
        let session = r["value"]["sessionId"]
            .as_str()
            .expect("session id")
            .to_owned();
        Some(Driver {
            base,
            session,
            _process: guard,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}/session/{}{path}", self.base, self.session)
    }

    pub fn go(&self, url: &str) {
        post(&self.url("/url"), &json!({ "url": url }));
    }

    pub fn run(&self, script: &str) -> Value {
        post(
            &self.url("/execute/sync"),
            &json!({ "script": script, "args": [] }),
        )["value"]
            .clone()
    }

    /// Waits until `script` returns true.
    pub fn until(&self, what: &str, script: &str) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if self.run(script) == Value::Bool(true) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "the page never {what}; errors: {}",
            self.run("return document.getElementById('error').textContent")
        );
    }

    pub fn refreshed(&self) -> u64 {
        self.run("return Number(document.body.dataset.refreshed || 0)")
            .as_u64()
            .unwrap_or(0)
    }

    pub fn wait_refresh_after(&self, n: u64) {
        self.until(
            "finished refreshing",
            &format!("return Number(document.body.dataset.refreshed || 0) > {n}"),
        );
    }

    /// Scrolls the element `selector` names to the top of the window, for a screenshot of it.
    pub fn show(&self, selector: &str) {
        self.run(&format!(
            "document.querySelector('{selector}').scrollIntoView({{block: 'start'}}); return true"
        ));
    }

    pub fn screenshot(&self, name: &str) -> Vec<u8> {
        let v = get(&self.url("/screenshot"));
        let png = base64::engine::general_purpose::STANDARD
            .decode(v["value"].as_str().expect("png"))
            .expect("base64");
        if let Ok(dir) = std::env::var("TAPFLOW_SCREENSHOTS") {
            std::fs::write(PathBuf::from(dir).join(format!("console-{name}.png")), &png).ok();
        }
        png
    }

    pub fn cdp(&self, cmd: &str, params: Value) {
        post(
            &self.url("/goog/cdp/execute"),
            &json!({ "cmd": cmd, "params": params }),
        );
    }

    pub fn severe_logs(&self) -> Vec<String> {
        let v = post(&self.url("/se/log"), &json!({ "type": "browser" }));
        v["value"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|e| e["level"] == "SEVERE")
                    .map(|e| e["message"].to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = ureq::delete(&format!("{}/session/{}", self.base, self.session)).call();
    }
}

/// POSTs `body` as JSON, and reads the answer's JSON.
pub fn post(url: &str, body: &Value) -> Value {
    let mut r = ureq::post(url)
        .config()
        .http_status_as_error(false)
        .build()
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let text = r.body_mut().read_to_string().expect("body");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("POST {url}: {e}: {text}"))
}

/// GETs `url` and reads its JSON.
pub fn get(url: &str) -> Value {
    let mut r = ureq::get(url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let text = r.body_mut().read_to_string().expect("body");
    serde_json::from_str(&text).expect("json")
}
