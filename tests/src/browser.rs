//! Headless Chromium (Debian's `chromium`) driven over the DevTools protocol
//! with chromiumoxide: what the web explorer's test and bench look through.

use std::path::Path;
use std::time::{Duration, Instant};

use chromiumoxide::browser::{Browser, BrowserConfig};
use chromiumoxide::cdp::browser_protocol::emulation::SetDeviceMetricsOverrideParams;
use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use chromiumoxide::page::{Page, ScreenshotParams};
use futures::StreamExt;
use serde_json::Value;

/// How long a condition may take to hold before a wait fails.
const PATIENCE: Duration = Duration::from_secs(90);

/// A headless Chromium with one page open, closed on [`Chromium::close`].
pub struct Chromium {
    browser: Browser,
    handler: tokio::task::JoinHandle<()>,
    pub page: Page,
    _profile: tempfile::TempDir,
}

impl std::fmt::Debug for Chromium {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chromium")
            .field("page", self.page.target_id())
            .finish_non_exhaustive()
    }
}

impl Chromium {
    /// Chromium at `url`, 1280 × 900, with a profile of its own.
    pub async fn open(url: &str) -> Chromium {
        let profile = tempfile::tempdir().expect("a profile folder");
        let config = BrowserConfig::builder()
            .chrome_executable(which("chromium"))
            .no_sandbox()
            .new_headless_mode()
            .user_data_dir(profile.path())
            .window_size(1280, 900)
            .viewport(None)
            .arg("--disable-gpu")
            .arg("--disable-dev-shm-usage")
            .build()
            .expect("a browser configuration");
        let (browser, mut events) = Browser::launch(config)
            .await
            .expect("chromium starts (scripts/test installs it)");
        let handler = memweave_process::task::spawn("browser_events", async move {
            while events.next().await.is_some() {}
        });
        let page = browser.new_page(url).await.expect("the page opens");
        Chromium {
            browser,
            handler,
            page,
            _profile: profile,
        }
    }

    /// The value of `expression` in the page, promises awaited; a script
    /// error fails the test with its message.
    pub async fn eval(&self, expression: &str) -> Value {
        let params = EvaluateParams::builder()
            .expression(expression)
            .await_promise(true)
            .return_by_value(true)
            .build()
            .expect("an evaluation");
        let evaluated = self
            .page
            .evaluate_expression(params)
            .await
            .unwrap_or_else(|e| panic!("evaluating {expression:?} failed: {e}"));
        evaluated.value().cloned().unwrap_or(Value::Null)
    }

    /// Waits until `condition` (a JS expression) is true; how long it took.
    pub async fn wait_for(&self, condition: &str) -> Duration {
        let started = Instant::now();
        loop {
            if self.eval(&format!("Boolean({condition})")).await == Value::Bool(true) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < PATIENCE,
                "waited {PATIENCE:?} for {condition}; the page shows: {}",
                self.eval("document.getElementById('main').innerText").await
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Milliseconds from running `action` in the page to `condition` holding
    /// there, timed by the page's own clock.
    pub async fn timed(&self, action: &str, condition: &str) -> f64 {
        let script = format!(
            "(async () => {{ const started = performance.now(); {action};
              const limit = started + {};
              while (!({condition})) {{
                if (performance.now() > limit) throw new Error('timed out: {}');
                await new Promise((done) => setTimeout(done, 2));
              }}
              return performance.now() - started; }})()",
            PATIENCE.as_millis(),
            condition.replace('\'', "\\'")
        );
        self.eval(&script).await.as_f64().expect("a duration")
    }

    /// Presses `key` (`Tab`, `Enter`, …) where the focus is.
    pub async fn press(&self, key: &str) {
        let body = self.page.find_element("body").await.expect("a body");
        body.press_key(key).await.expect("the key is pressed");
    }

    /// Goes to `hash` of the page already open (`#/documents`, …).
    pub async fn show(&self, hash: &str) {
        self.eval(&format!("location.hash = {}", Value::from(hash)))
            .await;
    }

    /// The viewport as a screen `width` CSS pixels wide (a phone at 390).
    pub async fn resize(&self, width: i64, height: i64, mobile: bool) {
        self.page
            .execute(SetDeviceMetricsOverrideParams::new(
                width, height, 1.0, mobile,
            ))
            .await
            .expect("the viewport resizes");
    }

    /// A PNG of the whole page at `path`.
    pub async fn screenshot(&self, path: &Path) {
        let params = ScreenshotParams::builder().full_page(true).build();
        self.page
            .save_screenshot(params, path)
            .await
            .unwrap_or_else(|e| panic!("screenshot {} failed: {e}", path.display()));
    }

    pub async fn close(mut self) {
        let _ = self.browser.close().await;
        let _ = self.browser.wait().await;
        self.handler.abort();
    }
}

/// `name` found on PATH.
fn which(name: &str) -> std::path::PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{name} is not on PATH (scripts/test installs it)"))
}
