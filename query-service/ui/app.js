// The memweave explorer. It reads the memory through the public HTTP API only
// (the same routes and bearer token as any client) and writes every string it
// gets as text: nothing from the memory ever becomes markup.

const state = {
  // The bearer token, when the service asks for one: this tab's memory only.
  token: null,
  // The checkpoint chosen in the picker; null follows the newest served.
  epoch: null,
  // The newest checkpoint served, from /readyz, and the one the view shows.
  newest: null,
  shown: null,
  strategies: [],
  // The last questions asked and their answers, shown again on return.
  asked: null,
};

const DOCUMENTS_PAGE = 50;
const RELATIONS_PAGE = 25;
const PAGES_LIST = 50;
// Characters shown on each side of a cited passage.
const CONTEXT_CHARS = 300;
const POLL_MS = 5000;

/// An element with attributes (`on` for listeners) and children; strings
/// become text nodes, never markup.
function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'on') {
      for (const [event, listener] of Object.entries(value)) node.addEventListener(event, listener);
    } else if (name === 'open' || name === 'selected' || name === 'required' || name === 'disabled') {
      node[name] = Boolean(value);
    } else if (name === 'value') {
      node.value = value;
    } else {
      node.setAttribute(name, String(value));
    }
  }
  append(node, children);
  return node;
}

/// `node` with `children` (as `el` takes them) in place of what it held.
function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const number = (n) => (typeof n === 'number' ? n.toLocaleString('en') : '—');
const decimal = (n, digits = 2) => (typeof n === 'number' ? n.toFixed(digits) : '—');
const when = (micros) => new Date(micros / 1000).toISOString().replace('T', ' ').slice(0, 19) + ' UTC';
const link = (href, ...text) => el('a', { href }, ...text);
const route = (...parts) => '#/' + parts.map(encodeURIComponent).join('/');

class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

let tokenAsked = null;

/// Shows the token form and resolves once a token is entered.
function askForToken() {
  if (tokenAsked) return tokenAsked;
  const form = document.getElementById('token-form');
  const input = document.getElementById('token');
  form.hidden = false;
  input.focus();
  tokenAsked = new Promise((resolve) => {
    form.addEventListener(
      'submit',
      (event) => {
        event.preventDefault();
        state.token = input.value.trim();
        input.value = '';
        form.hidden = true;
        tokenAsked = null;
        resolve();
      },
      { once: true },
    );
  });
  return tokenAsked;
}

/// A call of the public API: the chosen checkpoint added, the token sent
/// when there is one (asked for on a 401), the JSON error's text thrown.
async function api(path, { method = 'GET', query = {}, body } = {}) {
  const url = new URL(path, location.origin);
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== '') url.searchParams.set(name, value);
  }
  if (state.epoch !== null) {
    if (body) body = { ...body, epoch: state.epoch };
    else url.searchParams.set('epoch', state.epoch);
  }
  const headers = { Accept: 'application/json' };
  if (body) headers['Content-Type'] = 'application/json';
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  const response = await fetch(url, { method, headers, body: body && JSON.stringify(body) });
  if (response.status === 401) {
    await askForToken();
    return api(path, { method, query, body });
  }
  const data = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new ApiError(data.error || response.statusText, response.status);
  return data;
}

function failure(error) {
  return el('p', { class: 'error', role: 'alert' }, String(error.message || error));
}

/// Runs `load` into `box`, showing `waiting` until it is done and the error
/// if it fails.
async function fill(box, waiting, load) {
  replace(box, el('p', { class: 'loading' }, waiting));
  try {
    replace(box, await load());
  } catch (error) {
    replace(box, failure(error));
  }
}

// ---------------------------------------------------------------- routing

function parseRoute() {
  const [path, search] = location.hash.replace(/^#\/?/, '').split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { parts, query: new URLSearchParams(search || '') };
}

const views = {
  ask: askView,
  documents: documentsView,
  document: documentView,
  entities: entitiesView,
  entity: entityView,
  overview: overviewView,
};

async function render() {
  const { parts, query } = parseRoute();
  const name = views[parts[0]] ? parts[0] : 'ask';
  for (const a of document.querySelectorAll('nav a')) {
    const current = a.dataset.view === name || (name === 'document' && a.dataset.view === 'documents') ||
      (name === 'entity' && a.dataset.view === 'entities');
    if (current) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  state.shown = state.epoch ?? state.newest;
  showNotice();
  const main = document.getElementById('main');
  replace(main);
  main.dataset.view = name;
  await views[name](main, parts.slice(1), query);
}

// ---------------------------------------------------------------- checkpoints

async function loadCheckpoints() {
  const select = document.getElementById('checkpoint');
  try {
    const listed = await api('/v1/checkpoints', { query: { limit: 50 } });
    state.newest = listed.served;
    replace(
      select,
      el('option', { value: '' }, `newest (epoch ${listed.served})`),
      listed.checkpoints.map((c) =>
        el('option', { value: c.epoch, selected: c.epoch === state.epoch }, `epoch ${c.epoch} · ${when(c.created_at_micros)}`),
      ),
    );
  } catch (error) {
    replace(select, el('option', { value: '' }, 'newest'));
  }
}

function showNotice() {
  const notice = document.getElementById('notice');
  const parts = [];
  if (state.epoch !== null) {
    parts.push(`Showing checkpoint ${state.epoch}, as that commit left the memory; the newest served is ${state.newest}. `);
    parts.push(el('button', { type: 'button', on: { click: () => pick(null) } }, 'Show the newest'));
  } else if (state.shown !== null && state.newest !== null && state.newest > state.shown) {
    parts.push(`A newer checkpoint, epoch ${state.newest}, is now served (this view shows epoch ${state.shown}). `);
    parts.push(el('button', { type: 'button', on: { click: () => render() } }, 'Show it'));
  }
  notice.hidden = parts.length === 0;
  replace(notice, parts);
}

function pick(epoch) {
  state.epoch = epoch;
  document.getElementById('checkpoint').value = epoch === null ? '' : String(epoch);
  render();
}

/// The epoch the service serves (/readyz needs no token), or null while it
/// has none or cannot be reached.
async function servedEpoch() {
  try {
    const response = await fetch('/readyz');
    return response.ok ? (await response.json()).epoch : null;
  } catch (error) {
    return null;
  }
}

/// Watches for a newer checkpoint; none seen (the service may be
/// restarting) waits for the next poll.
async function poll() {
  const epoch = await servedEpoch();
  if (epoch !== null && epoch !== state.newest) {
    state.newest = epoch;
    if (state.shown === null) state.shown = epoch;
    showNotice();
    loadCheckpoints();
  }
  setTimeout(poll, POLL_MS);
}

// ---------------------------------------------------------------- passages

/// A passage shown in its document: the characters around it, its own
/// characters highlighted.
async function inDocument(passage) {
  const start = Math.max(0, passage.start_char - CONTEXT_CHARS);
  const end = passage.end_char + CONTEXT_CHARS;
  const read = await api(`/v1/documents/${encodeURIComponent(passage.doc_id)}/text`, { query: { start, end } });
  const chars = Array.from(read.text);
  const from = Math.max(0, passage.start_char - read.start_char);
  const to = Math.max(from, passage.end_char - read.start_char);
  return el(
    'p',
    { class: 'context', 'data-start': passage.start_char, 'data-end': passage.end_char },
    read.start_char > 0 ? '…' : '',
    chars.slice(0, from).join(''),
    el('mark', {}, chars.slice(from, to).join('')),
    chars.slice(to).join(''),
    '…',
  );
}

function passageItem(passage, { context = true } = {}) {
  const box = el('div', { class: 'context-box' });
  const item = el(
    'li',
    { class: 'passage', 'data-from': passage.from_id },
    el(
      'p',
      { class: 'cite' },
      link(route('document', passage.doc_id), passage.title || passage.doc_id),
      passage.section ? ` · ${passage.section.kind} ${passage.section.label}` : '',
      ` · characters ${number(passage.start_char)}–${number(passage.end_char)}`,
    ),
    box,
  );
  const show = () => fill(box, 'Reading the document…', () => inDocument(passage));
  if (context) show();
  else box.append(el('button', { type: 'button', on: { click: show } }, 'Show in its document'));
  return item;
}

// ---------------------------------------------------------------- ask

async function strategies() {
  if (state.strategies.length === 0) {
    const described = await (await fetch('/openapi.json')).json();
    state.strategies = described.components.schemas.AskRequest.properties.strategy.enum;
  }
  return state.strategies;
}

async function askView(main) {
  const names = await strategies().catch(() => ['memwalker']);
  const choose = (id, label, chosen, none) =>
    el(
      'p',
      { class: 'field' },
      el('label', { for: id }, label),
      el('select', { id }, none ? el('option', { value: '' }, 'none') : null, names.map((n) => el('option', { value: n, selected: n === chosen }, n))),
    );
  const limit = (id, label, hint) =>
    el('p', { class: 'field' }, el('label', { for: id }, label), el('input', { id, type: 'number', min: 1, inputmode: 'numeric', placeholder: hint }));
  const answers = el('div', { class: 'answers', 'aria-live': 'polite' });
  const asked = state.asked;
  const form = el(
    'form',
    { class: 'ask', on: { submit: (event) => { event.preventDefault(); ask(form, answers); } } },
    el('h2', {}, 'Ask the memory'),
    el('p', { class: 'field wide' }, el('label', { for: 'question' }, 'Question'),
      el('textarea', { id: 'question', rows: 2, required: true, value: asked ? asked.question : '' })),
    choose('strategy', 'Strategy', asked ? asked.strategies[0] : 'memwalker', false),
    choose('compare', 'Side by side with', asked ? asked.strategies[1] || '' : '', true),
    el('details', { class: 'limits' }, el('summary', {}, 'Budget and limits'),
      limit('budget', 'Context tokens', '2000'),
      limit('max-tokens', 'Model tokens at most', '100000'),
      limit('max-steps', 'Steps at most', '200')),
    el('p', {}, el('button', { type: 'submit' }, 'Ask')),
  );
  main.append(form, answers);
  if (asked) for (const shown of asked.shown) answers.append(shown);
}

async function ask(form, answers) {
  const question = form.querySelector('#question').value.trim();
  if (!question) return;
  const chosen = [form.querySelector('#strategy').value, form.querySelector('#compare').value].filter(Boolean);
  const options = {};
  for (const [id, key] of [['max-tokens', 'max_tokens'], ['max-steps', 'max_steps']]) {
    const value = form.querySelector('#' + id).value;
    if (value) options[key] = Number(value);
  }
  const budget = form.querySelector('#budget').value;
  answers.classList.toggle('two', chosen.length === 2);
  const columns = chosen.map((strategy) => {
    const column = el('section', { class: 'answer', 'data-strategy': strategy, 'aria-label': `Answer by ${strategy}` });
    const body = { question, strategy, options };
    if (budget) body.budget = Number(budget);
    const started = performance.now();
    fill(column, `Asking with ${strategy}…`, async () => {
      const answer = await api('/v1/ask', { method: 'POST', body });
      column.dataset.ms = String(Math.round(performance.now() - started));
      return answerView(answer);
    }).then(() => column.classList.add('done'));
    return column;
  });
  replace(answers, columns);
  state.asked = { question, strategies: chosen, shown: columns };
}

function answerView(answer) {
  const usage = answer.usage;
  return [
    el('h3', {}, answer.strategy),
    el('p', { class: answer.answered ? 'verdict yes' : 'verdict no' }, answer.answered ? 'Answered' : 'No answer', ` · checkpoint ${answer.epoch}`),
    el('blockquote', { class: 'answer-text' }, answer.answer),
    el('p', { class: 'usage' }, `${number(usage.model_calls)} model calls · ${number(usage.tokens_in)} tokens in · ${number(usage.tokens_out)} out · ${number(usage.model_ms)} ms waiting on the model`),
    el('h4', {}, `Cited passages (${answer.supporting.length})`),
    answer.supporting.length
      ? el('ol', { class: 'passages' }, answer.supporting.map((p, i) => passageItem(p, { context: i < 3 })))
      : el('p', {}, 'None.'),
    el('h4', {}, `Trace (${answer.trace.length} steps)`),
    traceTree(answer.trace),
  ];
}

/// The steps as a tree: a step nests under the step before it that is less
/// deep (MemWalker's path from the root, the look-ups under their round).
function traceTree(steps) {
  const tree = el('div', { class: 'trace' });
  const open = [{ depth: -1, into: tree }];
  for (const step of steps) {
    while (open.length > 1 && open[open.length - 1].depth >= step.depth) open.pop();
    const nested = el('div', { class: 'nested' });
    const signal = step.signal ? el('span', { class: `signal ${step.signal}` }, `by ${step.signal}`) : null;
    const calls = step.calls.length
      ? table(['task', 'tokens in', 'tokens out', 'latency ms', 'cached'], step.calls.map((c) => [
        c.task, number(c.tokens_in), number(c.tokens_out), number(c.latency_ms), c.cached ? 'yes' : 'no',
      ]), `Model calls of step ${step.step}`, 'calls')
      : el('p', { class: 'quiet' }, 'No model call.');
    const related = step.action === 'entities' && step.target
      ? el('p', {}, 'Look up: ', step.target.split(', ').map((name, i) =>
        [i ? ', ' : '', link('#/entities?' + new URLSearchParams({ name }), name)]))
      : step.action === 'choose_document'
        ? el('p', {}, link(route('document', step.target), 'Open the document'))
        : null;
    const details = el(
      'details',
      { class: 'step', 'data-action': step.action, 'data-signal': step.signal || 'none', 'data-depth': step.depth, open: step.depth === 0 },
      el('summary', {},
        el('span', { class: 'action' }, `${step.step}. ${step.action}`), ' ',
        step.target ? el('code', {}, step.target) : null,
        step.level !== null && step.level !== undefined ? ` · level ${step.level}` : '',
        ` · depth ${step.depth} `, signal,
        step.score ? ` · score ${decimal(step.score, 3)}` : ''),
      el('p', { class: 'reasoning' }, step.reasoning),
      related,
      calls,
      nested,
    );
    open[open.length - 1].into.append(details);
    open.push({ depth: step.depth, into: nested });
  }
  return tree;
}

// ---------------------------------------------------------------- documents

async function documentsView(main, _parts, query) {
  const q = query.get('q') || '';
  const after = query.get('after') || '';
  const form = searchForm('document-search', 'Find documents by id or title', q, (text) => `#/documents?${new URLSearchParams({ q: text })}`);
  const list = el('div', { class: 'documents' });
  main.append(el('h2', {}, 'Documents'), form, list);
  await fill(list, 'Listing…', async () => {
    const page = await api('/v1/documents', { query: { q, after, limit: DOCUMENTS_PAGE } });
    const pager = el('nav', { class: 'pager', 'aria-label': 'Pages of documents' },
      after ? link('#/documents?' + new URLSearchParams({ q }), 'First page') : null, ' ',
      page.next ? link('#/documents?' + new URLSearchParams({ q, after: page.next }), 'Next page') : null);
    return [
      el('p', {}, `${number(page.total)} documents${q ? ` whose id or title holds “${q}”` : ''}; ${page.documents.length} shown${after ? ` after ${after}` : ''}.`),
      table(['Title', 'Id', 'Tokens', 'Version'], page.documents.map((d) => [
        link(route('document', d.doc_id), d.title || d.doc_id), el('code', {}, d.doc_id), number(d.n_tokens), d.version,
      ]), 'Documents'),
      pager,
    ];
  });
}

/// A labelled search field whose submission goes to `hashOf(the text)`.
function searchForm(id, label, value, hashOf) {
  const input = el('input', { id, type: 'search', value });
  const submit = (event) => {
    event.preventDefault();
    location.hash = hashOf(input.value.trim());
  };
  return el('form', { role: 'search', on: { submit } },
    el('label', { for: id }, label), ' ', input, ' ', el('button', { type: 'submit' }, 'Find'));
}

/// A table whose rows are arrays of cells, scrolling sideways on a narrow screen.
function table(headings, rows, label, kind) {
  return el('div', { class: 'table', role: 'region', 'aria-label': label, tabindex: 0 },
    el('table', { class: kind },
      el('thead', {}, el('tr', {}, headings.map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, rows.map((cells) => el('tr', {}, cells.map((c) => el('td', {}, c)))))));
}

async function documentView(main, parts, query) {
  const docId = parts[0] || '';
  const shown = query.get('view') || 'memwalker';
  const head = el('div', { class: 'document-head' });
  const body = el('div', { class: 'document-body' });
  const tabs = el('nav', { class: 'tabs', 'aria-label': 'Memories of this document' },
    [['memwalker', 'MemWalker tree'], ['raptor', 'RAPTOR tree'], ['pages', 'ReadAgent pages']].map(([view, label]) =>
      el('a', { href: `${route('document', docId)}?view=${view}`, 'aria-current': view === shown ? 'page' : null }, label)));
  main.append(head, tabs, body);
  fill(head, 'Reading…', async () => {
    const d = await api(`/v1/documents/${encodeURIComponent(docId)}`);
    return [
      el('h2', {}, d.title || d.doc_id),
      el('p', { class: 'quiet' }, el('code', {}, d.doc_id), ` · ${d.source_uri} · ${number(d.n_tokens)} tokens · version ${d.version}`),
    ];
  });
  if (shown === 'pages') await fill(body, 'Reading the pages…', () => pagesList(docId, Number(query.get('from') || 0)));
  else await fill(body, 'Reading the tree…', () => treeRoots(docId, shown));
}

async function treeRoots(docId, tree) {
  const top = await api(`/v1/documents/${encodeURIComponent(docId)}/tree`, { query: { tree, depth: 0 } });
  if (top.nodes.length === 0) return el('p', {}, `This document has no ${tree} tree.`);
  return el('div', { class: 'tree', 'data-tree': tree }, top.nodes.map((n) => treeNode(docId, tree, n, true)));
}

/// A tree node: its summary; its children read when it is first opened; a
/// leaf's segment shown in its document.
function treeNode(docId, tree, node, open) {
  const children = el('div', { class: 'children' });
  const leaf = node.child_ids.length === 0;
  const details = el('details', { class: 'node', 'data-node': node.node_id, 'data-level': node.level },
    el('summary', {}, el('span', { class: 'level' }, leaf ? 'leaf' : `level ${node.level}`),
      ` · ${number(node.n_tokens)} tokens`, leaf ? '' : ` · ${node.child_ids.length} children`, ' · ',
      el('span', { class: 'gist' }, clip(node.summary, 140))),
    el('p', { class: 'summary' }, node.summary),
    node.surprise ? el('p', { class: 'surprise' }, el('strong', {}, 'Surprising facts: '), node.surprise) : null,
    children);
  let read = false;
  const expand = () => {
    if (!details.open || read) return;
    read = true;
    if (leaf && node.seg_id) {
      const segment = el('ol', { class: 'passages' });
      children.append(segment);
      fill(segment, 'Reading the segment…', async () =>
        passageItem(await api(`/v1/segments/${encodeURIComponent(node.seg_id)}`)));
    } else if (!leaf) {
      fill(children, 'Reading the children…', async () => {
        const under = await api(`/v1/documents/${encodeURIComponent(docId)}/tree`, { query: { tree, under: node.node_id } });
        return under.nodes.map((n) => treeNode(docId, tree, n, false));
      });
    }
  };
  details.addEventListener('toggle', expand);
  if (open) {
    details.open = true;
    expand();
  }
  return details;
}

const clip = (text, chars) => (text.length > chars ? text.slice(0, chars) + '…' : text);

async function pagesList(docId, from) {
  const listed = await api(`/v1/documents/${encodeURIComponent(docId)}/pages`, { query: { from, limit: PAGES_LIST } });
  const base = `${route('document', docId)}?view=pages&from=`;
  return [
    el('p', {}, `${number(listed.total)} pages; the gists ReadAgent reads first, each page's text on opening it.`),
    el('ol', { class: 'pages', start: from + 1 }, listed.pages.map((p) => {
      const text = el('div', { class: 'page-text' });
      let read = false;
      const details = el('details', { class: 'page', 'data-page': p.page },
        el('summary', {}, `Page ${p.page} · characters ${number(p.start_char)}–${number(p.end_char)} · `, el('span', { class: 'gist' }, p.gist)),
        text);
      details.addEventListener('toggle', () => {
        if (!details.open || read) return;
        read = true;
        fill(text, 'Reading the page…', async () => {
          const page = await api(`/v1/documents/${encodeURIComponent(docId)}/pages/${p.page}`);
          return el('p', {}, page.text);
        });
      });
      return el('li', {}, details);
    })),
    el('nav', { class: 'pager', 'aria-label': 'Pages of gists' },
      from > 0 ? link(base + Math.max(0, from - PAGES_LIST), 'Earlier pages') : null, ' ',
      from + PAGES_LIST < listed.total ? link(base + (from + PAGES_LIST), 'Later pages') : null),
  ];
}

// ---------------------------------------------------------------- entities

async function entitiesView(main, _parts, query) {
  const name = query.get('name') || '';
  const form = searchForm('entity-search', 'Find entities by name or alias', name, (text) => `#/entities?${new URLSearchParams({ name: text })}`);
  const found = el('div', { class: 'entities' });
  main.append(el('h2', {}, 'Entities'), form, found);
  if (!name) {
    found.append(el('p', {}, 'The graph QRMeM navigates: its entities, their relations and the segments they come from. Names in an answer’s trace lead here too.'));
    return;
  }
  await fill(found, 'Looking up…', async () => {
    const listed = await api('/v1/entities', { query: { name } });
    if (listed.entities.length === 0) return el('p', {}, `No entity is named “${name}”.`);
    return el('ul', { class: 'entity-list' }, listed.entities.map((e) =>
      el('li', {}, link(route('entity', e.entity_id), e.name), e.type ? ` (${e.type})` : '', ` · ${number(e.segments_total)} segments · `, clip(e.description, 200))));
  });
}

async function entityView(main, parts, query) {
  const id = parts[0] || '';
  const offset = Number(query.get('offset') || 0);
  await fill(main, 'Reading the entity…', async () => {
    const entity = await api(`/v1/entities/${encodeURIComponent(id)}`, { query: { limit: RELATIONS_PAGE, offset } });
    const names = new Map(entity.neighbours.map((n) => [n.entity_id, n]));
    names.set(entity.entity_id, entity);
    const named = (entityId) => (names.get(entityId) || { name: entityId }).name;
    const graph = el('div', { class: 'graph', role: 'img',
      'aria-label': `${entity.name} and the ${entity.neighbours.length} entities of relations ${offset + 1} to ${offset + entity.relations.length} of ${entity.relations_total}` });
    const base = `${route('entity', id)}?offset=`;
    const shown = [
      el('h2', {}, entity.name, entity.type ? el('span', { class: 'quiet' }, ` (${entity.type})`) : null),
      entity.aliases.length ? el('p', {}, 'Also: ', entity.aliases.join(', ')) : null,
      el('p', {}, entity.description),
      el('h3', {}, `Relations ${entity.relations.length ? offset + 1 : 0}–${offset + entity.relations.length} of ${number(entity.relations_total)}`),
      graph,
      table(['From', 'Relation', 'To'], entity.relations.map((r) => [
        r.source_id === id ? named(r.source_id) : link(route('entity', r.source_id), named(r.source_id)),
        r.description,
        r.target_id === id ? named(r.target_id) : link(route('entity', r.target_id), named(r.target_id)),
      ]), 'Relations'),
      el('nav', { class: 'pager', 'aria-label': 'Pages of relations' },
        offset > 0 ? link(base + Math.max(0, offset - RELATIONS_PAGE), 'Earlier relations') : null, ' ',
        offset + RELATIONS_PAGE < entity.relations_total ? link(base + (offset + RELATIONS_PAGE), 'More relations') : null),
      el('h3', {}, `Source segments ${entity.segments.length ? offset + 1 : 0}–${offset + entity.segments.length} of ${number(entity.segments_total)}`),
      el('ol', { class: 'passages', start: offset + 1 }, entity.segments.map((p) => passageItem(p, { context: false }))),
    ];
    // Drawn once the container is in the page (the graph measures it).
    setTimeout(() => drawGraph(graph, entity, named), 0);
    return shown;
  });
}

/// The entity and the other ends of its listed relations, with cytoscape.js;
/// a neighbour opens on a tap or click.
function drawGraph(container, entity, named) {
  if (!window.cytoscape) {
    container.append(el('p', {}, 'The graph library did not load; the relations are listed below.'));
    return;
  }
  const nodes = new Map([[entity.entity_id, { data: { id: entity.entity_id, label: entity.name, centre: 1 } }]]);
  const edges = [];
  for (const r of entity.relations) {
    for (const end of [r.source_id, r.target_id]) {
      if (!nodes.has(end)) nodes.set(end, { data: { id: end, label: named(end), centre: 0 } });
    }
    edges.push({ data: { id: r.relation_id, source: r.source_id, target: r.target_id } });
  }
  const cy = window.cytoscape({
    container,
    elements: [...nodes.values(), ...edges],
    layout: { name: 'concentric', concentric: (n) => n.data('centre'), levelWidth: () => 1, animate: false, padding: 20 },
    style: [
      { selector: 'node', style: { label: 'data(label)', 'font-size': 11, 'background-color': '#4a6fa5', color: '#1b1b1b', 'text-valign': 'bottom', 'text-margin-y': 4 } },
      { selector: 'node[centre = 1]', style: { 'background-color': '#b5442f', width: 40, height: 40 } },
      // Straight edges without labels draw in a fraction of the time; the
      // relations' descriptions are in the table below the graph.
      { selector: 'edge', style: { width: 1.5, 'line-color': '#8a9bb5', 'curve-style': 'straight', 'target-arrow-shape': 'triangle', 'target-arrow-color': '#8a9bb5' } },
    ],
    userZoomingEnabled: false,
  });
  cy.on('tap', 'node', (event) => {
    const id = event.target.id();
    if (id !== entity.entity_id) location.hash = route('entity', id);
  });
  // Drawn again to fit when the container changes size (a phone turned, a
  // window narrowed); the observer ends with the view.
  const resized = new ResizeObserver(() => {
    cy.resize();
    cy.fit(undefined, 20);
  });
  resized.observe(container);
  window.addEventListener('hashchange', () => resized.disconnect(), { once: true });
  container.dataset.nodes = String(cy.nodes().length);
  container.dataset.edges = String(cy.edges().length);
}

// ---------------------------------------------------------------- overview

async function overviewView(main) {
  const figures = el('div', { class: 'overview' });
  const checkpoints = el('div', { class: 'checkpoints' });
  main.append(el('h2', {}, 'Overview'), figures, el('h3', {}, 'Checkpoints'), checkpoints);
  fill(checkpoints, 'Listing the checkpoints…', async () => {
    const listed = await api('/v1/checkpoints', { query: { limit: 20 } });
    return table(['Epoch', 'Committed', ''], listed.checkpoints.map((c) => [
      c.epoch === listed.served ? `${c.epoch} (served)` : String(c.epoch),
      when(c.created_at_micros),
      el('button', { type: 'button', on: { click: () => pick(c.epoch === listed.served ? null : c.epoch) } }, `Show epoch ${c.epoch}`),
    ]), 'Checkpoints');
  });
  await fill(figures, 'Making the report (it reads whole tables: seconds on a large memory)…', async () => {
    const r = await api('/v1/overview');
    const figure = (label, value) => [el('dt', {}, label), el('dd', {}, value)];
    return [
      el('dl', { class: 'figures' },
        figure('Checkpoint', r.epoch),
        figure('Documents', number(r.overview.documents)),
        figure('Tokens', number(r.overview.tokens)),
        figure('Model tokens per corpus token', decimal(r.cost.tokens_per_corpus_token)),
        figure('Model calls', number(r.cost.calls)),
        figure('Errors', number(r.errors.reduce((n, e) => n + e.errors, 0)))),
      el('h3', {}, 'Calls per task'),
      table(['Task', 'Calls', 'Tokens in', 'Tokens out', 'Per corpus token'], r.calls_by_task.map((t) => [
        t.task, number(t.calls), number(t.tokens_in), number(t.tokens_out), decimal(t.tokens_per_corpus_token),
      ]), 'Calls per task'),
      el('h3', {}, 'Trees'),
      table(['Tree', 'Nodes', 'Roots', 'Deepest', 'Mean fan-out'], r.trees.map((t) => [
        t.tree, number(t.nodes), number(t.roots), number(t.max_depth), decimal(t.mean_fanout, 1),
      ]), 'Trees'),
      table(['Tree', 'Depth', 'Trees this deep'], r.tree_depths.map((d) => [d.tree, number(d.depth), number(d.trees)]), 'Tree depths'),
      el('h3', {}, 'Errors'),
      r.errors.length
        ? table(['Stage', 'Kind', 'Errors'], r.errors.map((e) => [e.stage, e.kind, number(e.errors)]), 'Errors')
        : el('p', {}, 'No input was refused.'),
    ];
  });
}

// ---------------------------------------------------------------- start

document.getElementById('checkpoint').addEventListener('change', (event) => {
  pick(event.target.value === '' ? null : Number(event.target.value));
});
window.addEventListener('hashchange', () => render());

(async () => {
  // Without one, the first request's error says why.
  state.newest = await servedEpoch();
  await render();
  // When the first view is on screen: what the browser test and bench time.
  performance.mark('memweave:ready');
  document.body.dataset.ready = 'true';
  loadCheckpoints();
  setTimeout(poll, POLL_MS);
})();
