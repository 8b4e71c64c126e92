//! Headless Chromium driven through its WebDriver server (`chromedriver`), spoken to
//! directly over HTTP: the W3C WebDriver protocol is a dozen JSON endpoints, so the tests
//! need no client library beyond reqwest (see `docs/console.md`).

use std::net::TcpListener;
#[cfg(unix)]
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

/// The key of an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long an element may take to appear.
pub const WAIT: Duration = Duration::from_secs(30);

/// The Chromium and driver binaries, when installed.
fn binaries() -> Result<(String, String), String> {
    let find = |names: &[&str]| {
        names.iter().find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join(name))
                    .find(|path| path.is_file())
                    .map(|path| path.display().to_string())
            })
        })
    };
    let chromium = find(&["chromium", "chromium-browser", "google-chrome"]).ok_or(
        "no `chromium` on PATH: install it with `apt-get install chromium chromium-driver`",
    )?;
    let driver = find(&["chromedriver"])
        .ok_or("no `chromedriver` on PATH: install it with `apt-get install chromium-driver`")?;
    Ok((chromium, driver))
}

/// Whether the browser tests can run. Outside CI a test prints why it is skipped and
/// returns `false`; with `CI=true` a missing browser fails the test.
pub fn available(test: &str) -> bool {
    let Err(reason) = binaries() else {
        return true;
    };
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {reason}");
    false
}

/// A chromedriver process and one headless Chromium session; both end on drop.
pub struct Browser {
    driver: Child,
    base: String,
    http: reqwest::Client,
}

/// An element of the page.
#[derive(Clone, Debug)]
pub struct Element(String);

impl Browser {
    /// Starts chromedriver on a free loopback port and a headless Chromium `width` by
    /// `height` pixels.
    pub async fn start(width: u32, height: u32) -> Browser {
        let (chromium, driver) = binaries().expect("chromium and chromedriver");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut command = Command::new(driver);
        #[cfg(unix)]
        command.process_group(0);
        let child = command
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("an HTTP client");
        let mut browser = Browser {
            driver: child,
            base: format!("http://127.0.0.1:{port}"),
            http,
        };
        let deadline = Instant::now() + WAIT;
        loop {
            let ready = browser
                .http
                .get(format!("{}/status", browser.base))
                .send()
                .await
                .ok();
            if let Some(answer) = ready
                && let Ok(status) = answer.json::<Value>().await
                && status["value"]["ready"] == true
            {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--disable-extensions", "--hide-scrollbars",
                    format!("--window-size={width},{height}"),
                ],
            },
        }}});
        let session = browser.call("POST", "/session", Some(capabilities)).await;
        let id = session["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {session}"))
            .to_owned();
        browser.base = format!("{}/session/{id}", browser.base);
        browser
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            _ => self.http.post(&url).json(&body.unwrap_or(json!({}))),
        };
        let answer = request.send().await.expect("a WebDriver answer");
        let status = answer.status();
        let value: Value = answer.json().await.expect("WebDriver JSON");
        assert!(
            status.is_success(),
            "WebDriver {method} {path}: {status} {value}"
        );
        value["value"].clone()
    }

    async fn try_call(&self, path: &str, body: Value) -> Option<Value> {
        let answer = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .ok()?;
        let ok = answer.status().is_success();
        let value: Value = answer.json().await.ok()?;
        ok.then(|| value["value"].clone())
    }

    /// Opens `url`.
    pub async fn go(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url}))).await;
    }

    /// Resizes the window.
    pub async fn resize(&self, width: u32, height: u32) {
        self.call(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await;
    }

    /// The first element matching `css` that is shown, waiting for it up to [`WAIT`].
    pub async fn find(&self, css: &str) -> Element {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(found) = self
                .try_call("/elements", json!({"using": "css selector", "value": css}))
                .await
            {
                for element in found.as_array().into_iter().flatten() {
                    let element = Element(element[ELEMENT].as_str().unwrap_or("").to_owned());
                    if self.shown(&element).await {
                        return element;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "no shown element matches `{css}` within {WAIT:?}; the page at {} says: {}",
                self.call("GET", "/url", None).await,
                self.page_text().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether an element is shown (false for one gone from the page).
    pub async fn shown(&self, element: &Element) -> bool {
        let url = format!("{}/element/{}/displayed", self.base, element.0);
        let Ok(answer) = self.http.get(url).send().await else {
            return false;
        };
        answer
            .json::<Value>()
            .await
            .is_ok_and(|v| v["value"] == true)
    }

    /// Whether some element matching `css` is shown now.
    pub async fn any_shown(&self, css: &str) -> bool {
        let found = self
            .call(
                "POST",
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        for element in found.as_array().into_iter().flatten() {
            let element = Element(element[ELEMENT].as_str().unwrap_or("").to_owned());
            if self.shown(&element).await {
                return true;
            }
        }
        false
    }

    /// Waits until no element matches `css` (the page it was on has gone).
    pub async fn wait_gone(&self, css: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let found = self
                .try_call("/elements", json!({"using": "css selector", "value": css}))
                .await;
            if found.is_some_and(|f| f.as_array().is_some_and(Vec::is_empty)) {
                return;
            }
            assert!(Instant::now() < deadline, "`{css}` is still on the page");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The text of the first shown `css` element, found again if the page re-renders it
    /// while it is read.
    pub async fn text_of(&self, css: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let element = self.find(css).await;
            let url = format!("{}/element/{}/text", self.base, element.0);
            if let Ok(answer) = self.http.get(url).send().await
                && answer.status().is_success()
                && let Ok(value) = answer.json::<Value>().await
            {
                return value["value"].as_str().unwrap_or("").to_owned();
            }
            assert!(Instant::now() < deadline, "`{css}` kept going stale");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the text of the first shown `css` element contains `text`.
    pub async fn wait_text(&self, css: &str, text: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let now = self.text_of(css).await;
            if now.contains(text) {
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "`{css}` did not come to say {text:?} within {WAIT:?}: it says {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks the first shown `css` element (found again if it goes stale first).
    pub async fn click(&self, css: &str) {
        self.act(css, "click", json!({})).await;
    }

    /// Types `text` into the first shown `css` element (`\u{E007}` is Enter).
    pub async fn type_into(&self, css: &str, text: &str) {
        self.act(css, "value", json!({"text": text})).await;
    }

    async fn act(&self, css: &str, action: &str, body: Value) {
        let deadline = Instant::now() + WAIT;
        loop {
            let element = self.find(css).await;
            let path = format!("/element/{}/{action}", element.0);
            if self.try_call(&path, body.clone()).await.is_some() {
                return;
            }
            assert!(Instant::now() < deadline, "`{css}` kept going stale");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The address of the page shown now.
    pub async fn url(&self) -> String {
        let url = self.call("GET", "/url", None).await;
        url.as_str().unwrap_or("").to_owned()
    }

    /// Makes every request to an address matching one of `patterns` (`*` stands for any
    /// text) fail, as a network that loses them would: through Chromium's DevTools
    /// protocol, which chromedriver passes on.
    pub async fn block(&self, patterns: &[&str]) {
        for (cmd, params) in [
            ("Network.enable", json!({})),
            ("Network.setBlockedURLs", json!({"urls": patterns})),
        ] {
            let command = json!({"cmd": cmd, "params": params});
            self.call("POST", "/goog/cdp/execute", Some(command)).await;
        }
    }

    /// The text of the whole page.
    pub async fn page_text(&self) -> String {
        self.run("return document.body.innerText;", json!([]))
            .await
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    /// Runs `script` in the page with `args`; its return value.
    pub async fn run(&self, script: &str, args: Value) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// The value of the cookie `name` (HttpOnly ones too: the driver sees them).
    pub async fn cookie(&self, name: &str) -> Option<String> {
        let cookies = self.call("GET", "/cookie", None).await;
        cookies
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|c| (c["name"] == name).then(|| c["value"].as_str().unwrap_or("").to_owned()))
    }

    /// A cookie's attributes, as the browser keeps them.
    pub async fn cookie_attributes(&self, name: &str) -> Option<Value> {
        let cookies = self.call("GET", "/cookie", None).await;
        cookies
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == name)
            .cloned()
    }

    /// A PNG of the window, written to `path`.
    pub async fn screenshot(&self, path: &std::path::Path) {
        let png = self.call("GET", "/screenshot", None).await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap_or(""))
            .expect("a base64 screenshot");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("the screenshot folder");
        }
        std::fs::write(path, bytes).expect("writing the screenshot");
    }
}

impl Browser {
    /// Ends the Chromium session (the driver ends with the value).
    pub async fn quit(self) {
        let _ = self.http.delete(&self.base).send().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The driver was started in a process group of its own, with Chromium in it: end
        // the group, so that no browser outlives a failing test. `--` matters: without it,
        // procps-ng's `kill` does not take `-PGID` for a process group.
        let group = self.driver.id();
        if group > 1 {
            let _ = Command::new("kill")
                .args(["-s", "KILL", "--", &format!("-{group}")])
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
