//! The web explorer in a real browser: headless Chromium over the DevTools
//! protocol, the query service's page at `/` over the pg-essays memory and a
//! document written to attack it. Screenshots of every view land in
//! `test-artifacts/explorer/` beside the test binaries' folder.

use std::path::{Path, PathBuf};

use memweave_query::Answer;
use memweave_tests::browser::Chromium;
use memweave_tests::index;
use serde_json::{Value, json};

use super::query::serve_with;
use super::shared::{PG_ESSAYS_FLAGS, archive_of, essays};

/// A document that would run script wherever its text became markup.
const HOSTILE: &str = "A hostile note about murals. <script>window.__pwned = 1; document.title = 'pwned';</script>\n\
It names the <img src=x onerror=\"window.__pwned = 2\"> tag and <a href=\"javascript:window.__pwned=3\">a link</a>.\n\
The harbour guild's muralists wrote that lime plaster cures slowly in winter.\n";
const HOSTILE_QUESTION: &str =
    "Which plaster did the harbour guild muralists say cures slowly in winter?";
const QUESTION: &str = "What did the author do at Y Combinator?";
const TOKEN: &str = "explorer-secret";

/// Where the screenshots go: a folder CI can keep.
fn artifacts() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary");
    let target = exe.ancestors().nth(3).expect("the target folder");
    let dir = target.join("test-artifacts").join("explorer");
    std::fs::create_dir_all(&dir).expect("the artifacts folder");
    dir
}

/// The API's answer to `question` by `strategy`, for comparing with the page.
async fn asked(base: &str, question: &str, strategy: &str) -> Answer {
    let body = json!({ "question": question, "strategy": strategy });
    let answer = reply(
        reqwest::Client::new()
            .post(format!("{base}/v1/ask"))
            .json(&body),
    )
    .await;
    serde_json::from_value(answer).unwrap()
}

async fn get(base: &str, path: &str) -> Value {
    reply(reqwest::Client::new().get(format!("{base}{path}"))).await
}

/// The body of `request`'s reply, sent with the token.
async fn reply(request: reqwest::RequestBuilder) -> Value {
    let response = request.bearer_auth(TOKEN).send().await.unwrap();
    response.json().await.unwrap()
}

/// axe-core's level-A violations of the page as it stands (rule ids and
/// what they flag): none is allowed.
async fn accessibility(browser: &Chromium, axe: &str, view: &str) {
    if browser.eval("typeof window.axe").await != "object" {
        browser.eval(axe).await;
    }
    let violations = browser
        .eval(
            "axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag21a'] } })
               .then((r) => r.violations.map((v) => ({ id: v.id, nodes: v.nodes.map((n) => n.html.slice(0, 120)) })))",
        )
        .await;
    assert_eq!(violations, json!([]), "level-A violations in {view}");
}

/// Nothing the hostile document holds ran or became an element.
async fn nothing_ran(browser: &Chromium) {
    let state = browser
        .eval(
            "({ pwned: window.__pwned ?? null, title: document.title,
                scripts: document.scripts.length, images: document.images.length })",
        )
        .await;
    assert_eq!(
        state,
        json!({ "pwned": null, "title": "memweave explorer", "scripts": 2, "images": 0 })
    );
}

/// A text's words: a passage's text is its characters with the spaces
/// between words made single.
fn words(text: &Value) -> String {
    let text = text.as_str().expect("a text");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn shoot(browser: &Chromium, name: &str) {
    browser
        .screenshot(&artifacts().join(format!("{name}.png")))
        .await;
}

/// The page at a phone's width scrolls only down: nothing is wider than 390
/// pixels.
async fn fits_a_phone(browser: &Chromium, view: &str) {
    browser.resize(390, 844, true).await;
    let width = browser
        .eval("document.documentElement.scrollWidth")
        .await
        .as_i64()
        .unwrap();
    let wide = browser
        .eval(
            "[...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > 391)
               .slice(-3).map((e) => e.outerHTML.slice(0, 160))",
        )
        .await;
    assert!(
        width <= 390,
        "{view} is {width} px wide at a 390 px screen: {wide}"
    );
    // A graph is drawn again at its container's new width.
    browser
        .wait_for(
            "[...document.querySelectorAll('.graph')].every((g) =>
               [...g.querySelectorAll('canvas')].every((c) => c.style.width === g.clientWidth + 'px'))",
        )
        .await;
    shoot(browser, &format!("{view}-390px")).await;
    browser.resize(1280, 900, false).await;
}

/// The explorer over pg-essays and a hostile document, in Chromium: the token
/// asked for, a question answered by two strategies side by side with the
/// cited passage highlighted in its document and every step of both traces,
/// a tree opened a level at a time down to a leaf's segment, a document's
/// pages and gists, an entity's graph paged, the overview, time travel to
/// an earlier checkpoint with the notice of a newer one; the hostile text
/// shown literally and never run; level-A accessibility, the keyboard, and a
/// 390-pixel screen.
#[test]
fn the_explorer_shows_memories_and_traces_in_a_browser() {
    let axe_path = std::env::var("MEMWEAVE_AXE_JS")
        .expect("MEMWEAVE_AXE_JS names axe.min.js (scripts/test fetches it)");
    let axe = std::fs::read_to_string(&axe_path).expect("axe-core reads");
    let names: Vec<String> = essays().into_iter().map(|(name, _)| name).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (dir, archive) = archive_of(&names);
    std::fs::write(archive.join("hostile.txt"), HOSTILE).unwrap();
    let tables = dir.path().join("memory");
    index(&archive, &tables, &PG_ESSAYS_FLAGS);
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let (_server, base) = serve_with(
        tables.to_str().unwrap(),
        &["--auth-token-file", token_file.to_str().unwrap()],
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let browser = Chromium::open(&format!("{base}/#/ask")).await;
        let started = browser.wait_for("document.body.dataset.ready === 'true'").await;
        let first_view = browser
            .eval("performance.getEntriesByName('memweave:ready')[0].startTime")
            .await;
        println!("first view rendered {first_view} ms after navigation ({started:?} seen)");

        // The token: asked for by the page, never in its address.
        browser
            .wait_for("!document.getElementById('token-form').hidden")
            .await;
        let field = browser.page.find_element("#token").await.unwrap();
        field.click().await.unwrap().type_str(TOKEN).await.unwrap();
        field.press_key("Enter").await.unwrap();
        browser
            .wait_for("document.getElementById('checkpoint').options.length > 1")
            .await;
        assert!(!browser.eval("location.href").await.to_string().contains(TOKEN));
        accessibility(&browser, &axe, "the ask form").await;

        // The keyboard reaches the question, both strategies and the button.
        browser.eval("document.activeElement.blur()").await;
        let mut reached = Vec::new();
        for _ in 0..20 {
            browser.press("Tab").await;
            reached.push(
                browser
                    .eval("document.activeElement.id || document.activeElement.textContent")
                    .await,
            );
        }
        for wanted in ["question", "strategy", "compare", "Ask"] {
            assert!(reached.contains(&json!(wanted)), "Tab never reaches {wanted}: {reached:?}");
        }

        // Two strategies side by side, every step of each trace in the page.
        let question = browser.page.find_element("#question").await.unwrap();
        question.click().await.unwrap().type_str(QUESTION).await.unwrap();
        browser
            .eval("document.getElementById('compare').value = 'qrmem'")
            .await;
        browser
            .page
            .find_element("form.ask button[type=submit]")
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        browser
            .wait_for("document.querySelectorAll('.answer.done').length === 2")
            .await;
        for strategy in ["memwalker", "qrmem"] {
            let answer = asked(&base, QUESTION, strategy).await;
            assert!(answer.answered, "{strategy}: {}", answer.answer);
            let column = format!(".answer[data-strategy={strategy}]");
            let shown = browser
                .eval(&format!(
                    "(() => {{ const c = document.querySelector('{column}');
                      return {{ answer: c.querySelector('.answer-text').textContent,
                        steps: [...c.querySelectorAll('details.step')].map((d) => d.dataset.action),
                        signals: [...c.querySelectorAll('details.step')].map((d) => d.dataset.signal),
                        calls: c.querySelectorAll('table.calls tbody tr').length }}; }})()"
                ))
                .await;
            let actions: Vec<&str> = answer.trace.iter().map(|s| s.action.as_str()).collect();
            let signals: Vec<&str> = answer
                .trace
                .iter()
                .map(|s| s.signal.map_or("none", |g| g.name()))
                .collect();
            assert_eq!(shown["answer"], answer.answer.as_str(), "{strategy}");
            assert_eq!(shown["steps"], json!(actions), "{strategy}");
            assert_eq!(shown["signals"], json!(signals), "{strategy}");
            let calls: usize = answer.trace.iter().map(|s| s.calls.len()).sum();
            assert_eq!(shown["calls"], calls, "{strategy}");
            // The first cited passage, highlighted in its document.
            let passage = &answer.supporting[0];
            browser
                .wait_for(&format!("document.querySelector('{column} .passage mark')"))
                .await;
            let mark = browser
                .eval(&format!("document.querySelector('{column} .passage mark').textContent"))
                .await;
            let range = format!(
                "/v1/documents/{}/text?start={}&end={}",
                passage.doc_id, passage.start_char, passage.end_char
            );
            assert_eq!(mark, get(&base, &range).await["text"], "{strategy}'s cited characters");
            assert_eq!(words(&mark), words(&json!(passage.text)), "{strategy}'s cited passage");
        }
        accessibility(&browser, &axe, "two answers").await;
        shoot(&browser, "ask-side-by-side").await;
        fits_a_phone(&browser, "ask-side-by-side").await;

        // A trace step opens and closes from the keyboard.
        let toggled = browser
            .eval(
                "(() => { const s = document.querySelector('.answer details.step details.step > summary');
                  s.focus(); return s.parentElement.open; })()",
            )
            .await;
        browser.press("Enter").await;
        let now = browser.eval("document.activeElement.parentElement.open").await;
        assert_ne!(toggled, now, "Enter on a step's summary toggles it");

        // The hostile document: cited, listed, its tree and pages shown, as text.
        let hostile = asked(&base, HOSTILE_QUESTION, "bm25").await;
        assert!(hostile.supporting[0].text.contains("<script>"), "{hostile:?}");
        browser.show("#/ask").await;
        browser.wait_for("document.getElementById('question')").await;
        browser
            .eval(&format!(
                "document.getElementById('question').value = {};
                 document.getElementById('strategy').value = 'bm25';
                 document.getElementById('compare').value = '';
                 document.querySelector('form.ask button[type=submit]').click()",
                json!(HOSTILE_QUESTION)
            ))
            .await;
        // The bm25 column: the memwalker and qrmem answers asked before are
        // shown again on returning to #/ask until this one replaces them.
        let bm25_mark = "document.querySelector('.answer.done[data-strategy=bm25] .passage mark')";
        browser.wait_for(bm25_mark).await;
        let mark = browser.eval(&format!("{bm25_mark}.textContent")).await;
        assert_eq!(words(&mark), words(&json!(hostile.supporting[0].text)));
        nothing_ran(&browser).await;
        let hostile_id = hostile.supporting[0].doc_id.clone();
        browser.show("#/documents?q=HOSTILE").await;
        browser.wait_for("document.querySelector('.documents table')").await;
        let listed = browser.eval("document.querySelector('.documents tbody').textContent").await;
        assert!(listed.as_str().unwrap().contains("<script>window.__pwned = 1;"), "{listed}");
        shoot(&browser, "documents-search").await;
        browser
            .show(&format!("#/document/{hostile_id}?view=pages"))
            .await;
        browser.wait_for("document.querySelector('details.page')").await;
        browser.eval("document.querySelector('details.page').open = true").await;
        browser.wait_for("document.querySelector('.page-text p:not(.loading)')").await;
        let page = browser.eval("document.querySelector('.page-text p:not(.loading)').textContent").await;
        let stored = get(&base, &format!("/v1/documents/{hostile_id}/pages/0")).await;
        assert_eq!(page, stored["text"]);
        assert!(page.as_str().unwrap().contains("<img src=x onerror="), "{page}");
        nothing_ran(&browser).await;

        // The documents, a page at a time, all counted.
        browser.show("#/documents").await;
        browser.wait_for("document.querySelector('.documents table')").await;
        let total = get(&base, "/v1/documents?limit=1").await["total"].clone();
        let said = browser.eval("document.querySelector('.documents p:not(.loading)').textContent").await;
        assert!(said.as_str().unwrap().starts_with(&format!("{total} documents")), "{said}");
        accessibility(&browser, &axe, "the documents").await;
        fits_a_phone(&browser, "documents").await;

        // A MemWalker tree: the root and its children, a level opened, a leaf's segment.
        let essay_id = asked(&base, QUESTION, "memwalker").await.supporting[0].doc_id.clone();
        browser.show(&format!("#/document/{essay_id}?view=memwalker")).await;
        browser.wait_for("document.querySelector('.tree .children details.node')").await;
        let tree = get(&base, &format!("/v1/documents/{essay_id}/tree")).await;
        let nodes = tree["nodes"].as_array().unwrap();
        let root = nodes.iter().find(|n| n["parent_id"].is_null()).unwrap();
        let children = browser
            .eval("[...document.querySelectorAll('.tree > details.node > .children > details.node')].map((d) => d.dataset.node)")
            .await;
        assert_eq!(children, root["child_ids"], "the root's children, in order");
        let level_ms = browser
            .timed(
                "document.querySelector('.tree > details > .children > details.node').open = true",
                "document.querySelector('.tree > details > .children > details.node > .children > details')",
            )
            .await;
        println!("a tree level opened in {level_ms:.0} ms");
        // Down the first children to a leaf, then its segment in its document.
        loop {
            let opened = browser
                .eval(
                    "(() => { const open = [...document.querySelectorAll('.tree details.node')].filter((d) => d.open);
                      const deepest = open[open.length - 1];
                      const next = deepest.querySelector(':scope > .children > details.node');
                      if (!next) return 'leaf'; next.open = true; return next.dataset.node; })()",
                )
                .await;
            if opened == "leaf" {
                break;
            }
            browser
                .wait_for(&format!(
                    "(() => {{ const d = document.querySelector('details.node[data-node={opened}]');
                      return d.querySelector('.children details, .children .passage'); }})()"
                ))
                .await;
        }
        browser.wait_for("document.querySelector('.tree .passage mark')").await;
        let leaf = browser
            .eval("document.querySelector('.tree .passage').dataset.from")
            .await;
        let segment = get(&base, &format!("/v1/segments/{}", leaf.as_str().unwrap())).await;
        let mark = browser.eval("document.querySelector('.tree .passage mark').textContent").await;
        assert_eq!(words(&mark), words(&segment["text"]));
        accessibility(&browser, &axe, "a tree").await;
        shoot(&browser, "memwalker-tree").await;
        fits_a_phone(&browser, "memwalker-tree").await;
        browser.show(&format!("#/document/{essay_id}?view=raptor")).await;
        browser.wait_for("document.querySelector('.tree[data-tree=raptor] details.node')").await;
        shoot(&browser, "raptor-tree").await;

        // ReadAgent's pages with their gists; a page's text on opening it.
        browser.show(&format!("#/document/{essay_id}?view=pages")).await;
        browser.wait_for("document.querySelector('details.page')").await;
        let pages = get(&base, &format!("/v1/documents/{essay_id}/pages")).await;
        let gists = browser
            .eval("[...document.querySelectorAll('details.page .gist')].map((g) => g.textContent)")
            .await;
        let stored: Vec<&Value> = pages["pages"].as_array().unwrap().iter().map(|p| &p["gist"]).collect();
        assert_eq!(gists, json!(stored));
        browser.eval("document.querySelector('details.page').open = true").await;
        browser.wait_for("document.querySelector('.page-text p:not(.loading)')").await;
        let first = get(&base, &format!("/v1/documents/{essay_id}/pages/0")).await;
        let text = browser.eval("document.querySelector('.page-text p:not(.loading)').textContent").await;
        assert_eq!(text, first["text"]);
        accessibility(&browser, &axe, "the pages").await;
        shoot(&browser, "readagent-pages").await;

        // An entity from QRMeM's trace: its neighbourhood drawn, a page at a time.
        let qrmem = asked(&base, QUESTION, "qrmem").await;
        let names = &qrmem.trace.iter().find(|s| s.action == "entities").unwrap().target;
        let mut hub = None;
        for name in names.split(", ") {
            let found = get(&base, &format!("/v1/entities?name={}", name.replace(' ', "%20"))).await;
            for entity in found["entities"].as_array().unwrap() {
                let id = entity["entity_id"].as_str().unwrap().to_string();
                let relations = get(&base, &format!("/v1/entities/{id}?limit=1")).await["relations_total"]
                    .as_u64()
                    .unwrap();
                if relations > hub.as_ref().map_or(0, |(_, n, _)| *n) {
                    hub = Some((id, relations, name.to_string()));
                }
            }
        }
        let (entity_id, relations, name) = hub.expect("an entity of the question with relations");
        browser
            .show(&format!("#/entities?name={}", name.replace(' ', "%20")))
            .await;
        browser.wait_for("document.querySelector('.entity-list a')").await;
        let graph_ms = browser
            .timed(
                &format!("location.hash = '#/entity/{entity_id}'"),
                "document.querySelector('.graph[data-nodes]')",
            )
            .await;
        println!("an entity's neighbourhood ({relations} relations) drawn in {graph_ms:.0} ms");
        let entity = get(&base, &format!("/v1/entities/{entity_id}?limit=25")).await;
        let drawn = browser
            .eval("(() => { const g = document.querySelector('.graph'); return [Number(g.dataset.nodes), Number(g.dataset.edges)]; })()")
            .await;
        let edges = entity["relations"].as_array().unwrap().len();
        assert_eq!(drawn[1], edges, "an edge per relation listed");
        assert!(drawn[0].as_u64().unwrap() >= 2 && drawn[0].as_u64().unwrap() <= 26, "{drawn}");
        assert_eq!(
            browser.eval("document.querySelectorAll('.graph canvas').length > 0").await,
            true
        );
        if relations > 25 {
            let more = browser.eval("[...document.querySelectorAll('.pager a')].some((a) => a.textContent === 'More relations')").await;
            assert_eq!(more, true, "a hub is paged");
        }
        accessibility(&browser, &axe, "an entity").await;
        shoot(&browser, "entity-graph").await;
        fits_a_phone(&browser, "entity-graph").await;

        // The overview: the report's figures.
        browser.show("#/overview").await;
        browser.wait_for("document.querySelector('.figures')").await;
        let figures = browser.eval("document.querySelector('.figures').textContent").await;
        let report = get(&base, "/v1/overview").await;
        let documents = &report["overview"]["documents"];
        assert!(
            figures.as_str().unwrap().contains(&format!("Documents{documents}")),
            "{figures}"
        );
        // Calls per task: each task's calls and tokens as the report counts them.
        let shown = browser
            .eval(
                "[...document.querySelectorAll('[aria-label=\"Calls per task\"] tbody tr')]
                   .map((r) => [...r.cells].slice(0, 4).map((c) => c.textContent.replaceAll(',', '')))",
            )
            .await;
        let counted: Vec<Vec<String>> = report["calls_by_task"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                ["task", "calls", "tokens_in", "tokens_out"]
                    .iter()
                    .map(|k| t[k].as_str().map_or_else(|| t[k].to_string(), String::from))
                    .collect()
            })
            .collect();
        assert_eq!(shown, json!(counted));
        accessibility(&browser, &axe, "the overview").await;
        shoot(&browser, "overview").await;
        fits_a_phone(&browser, "overview").await;

        // A newer checkpoint is noticed; the earlier one is still there to see.
        std::fs::write(archive.join("later.txt"), "A later note about lighthouses.\n").unwrap();
        index(&archive, &tables, &PG_ESSAYS_FLAGS);
        browser
            .wait_for("document.getElementById('notice').textContent.includes('epoch 2')")
            .await;
        browser.show("#/documents").await;
        browser
            .wait_for("document.querySelector('.documents p:not(.loading)') && document.getElementById('checkpoint').options.length === 3")
            .await;
        let newest = browser.eval("document.querySelector('.documents p:not(.loading)').textContent").await;
        let more = total.as_u64().unwrap() + 1;
        assert!(newest.as_str().unwrap().starts_with(&format!("{more} documents")), "{newest}");
        browser
            .eval("const s = document.getElementById('checkpoint'); s.value = '1'; s.dispatchEvent(new Event('change'))")
            .await;
        browser
            .wait_for(&format!(
                "document.querySelector('.documents p:not(.loading)') && document.querySelector('.documents p:not(.loading)').textContent.startsWith('{total} documents')"
            ))
            .await;
        let notice = browser.eval("document.getElementById('notice').textContent").await;
        assert!(notice.as_str().unwrap().contains("checkpoint 1"), "{notice}");
        shoot(&browser, "time-travel").await;
        nothing_ran(&browser).await;
        browser.close().await;
    });
    assert!(Path::new(&artifacts().join("entity-graph.png")).exists());
}
