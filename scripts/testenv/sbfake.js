'use strict';
/*
 * sbfake.js — a local AMQP 1.0 peer that speaks enough of Azure Service Bus for the
 * unmodified azservicebus Go SDK (v1.11.0, go-amqp v1.7.0). Test infrastructure only.
 *
 * Run:  PORT=0 TOPOLOGY='{"topics":[...]}' node sbfake.js      → prints "LISTENING <port>"
 * Connect with: Endpoint=sb://127.0.0.1:<port>;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true
 * (plain TCP, SASL ANONYMOUS; any CBS token is accepted).
 *
 * Environment
 *   PORT           listen port on 127.0.0.1 (0 = a free one; default 0)
 *   TOPOLOGY       topology JSON (below); or TOPOLOGY_FILE = path of a JSON file
 *   LOCK_MS        message lock duration in ms (default 60000; topology "lockMs" wins)
 *   MAX_DELIVERY   default max delivery count (default 10; topology "maxDeliveryCount" wins)
 *   DEBUG_FAKE=1   log entity operations to stderr (never message bodies)
 *   TESTENV_HOST=1 run as a host of brokers, each started and stopped by a command on stdin
 *                  with the variables above as its settings (host.js)
 *   SEND_FAULTS    JSON; unset (the default) injects nothing. Rejects a seeded share of the
 *                  messages clients send, for fault runs:
 *                    {"rate": 0.05, "seed": 7, "entities": ["Billing"],
 *                     "match": [{"equals": {"To": "Resolver"}}], "condition": "amqp:not-allowed"}
 *                  Each message sent to one of "entities" (a topic or queue; by transfer, or
 *                  scheduled through the entity's $management link) that matches any "match"
 *                  rule (rule syntax as in the topology; no "match" = every message) is refused
 *                  with probability "rate" (a mulberry32 stream seeded with "seed", drawn once
 *                  per eligible message in arrival order). A refused transfer is rejected with
 *                  "condition" (default amqp:not-allowed, which the SDK does not retry); a
 *                  refused schedule request is answered with status 404 (also not retried).
 *                  Nothing of a refused transfer or schedule request is stored. Each refusal
 *                  prints "sbfake: injected send fault (<entity>, To=<To>)" on stderr. In a host
 *                  (TESTENV_HOST=1), "SET <id> {"SEND_FAULTS": "<JSON>"}" replaces a running
 *                  broker's send faults (an empty value ends them); the stream starts again
 *                  from the new seed.
 *
 * Topology (there is no admin API, so entities are declared up front):
 *   {
 *     "lockMs": 60000, "maxDeliveryCount": 10,                       // optional defaults
 *     "queues": [ {"name": "q", "requiresSession": false, "maxDeliveryCount": 10} ],
 *     "topics": [ {"name": "Orders", "subscriptions": [
 *        {"name": "Orders", "requiresSession": true, "maxDeliveryCount": 10,
 *         "forwardTo": "",                                          // entity to auto-forward to, or ""
 *         "rules": [                                                // none = accept everything ($Default)
 *           {"name": "to-Orders", "equals": {"To": "Orders"}},
 *           {"name": "retry", "equals": {"To": "Retry"}, "set": {"To": "Orders", "From": "Retry"}},
 *           {"equals": {"EventTypeId": "X"}, "isNull": ["From"], "notNull": ["OriginalSessionId"],
 *            "set": {"EventId": "newid()"}}
 *         ]}]} ]
 *   }
 *   A rule matches when every condition holds: "equals" compares application properties as
 *   strings, "isNull"/"notNull" test absence or AMQP null. "set" stamps string application
 *   properties on the copy (SQL-action "SET user.X = '...'"); the literal "newid()" is a fresh
 *   GUID. A subscription takes one copy per message when any rule matches (the first matching
 *   rule's action applies; NimBus's rules are disjoint). Names are case-insensitive.
 *   A message sent to a topic is routed to its declared subscriptions at send time, whether or
 *   not a receiver is attached. An undeclared address becomes an implicit queue on first use,
 *   except "<declared topic>/Subscriptions/<undeclared>", which fails with amqp:not-found.
 *
 * Modelled: queues, topics, subscriptions with filters/actions/forwarding (at most 4 hops),
 * sessions (accept a named session, accept the next free one — waiting up to the client's
 * com.microsoft:timeout —, session state, renew), PeekLock and ReceiveAndDelete, complete,
 * abandon (delivery count + 1), release (no count), defer + receive-by-sequence-number,
 * dead-letter with reason/description, dead-letter after max deliveries, message lock expiry,
 * lock renewal, scheduled messages (annotation or $management), peek, batches, and
 * broker-assigned MessageIds (32 hex digits) for messages sent without one. Closing a session
 * receiver frees the session and returns its unsettled messages without counting a delivery;
 * closing a plain receiver leaves its message locks to expire (lock expiry counts).
 * Not modelled: TTL/expiry, duplicate detection, transactions, partitions, rule management,
 * ListSessions, size limits beyond the advertised 1 MiB, session-lock expiry (a session stays
 * locked while its link is attached), token validation.
 *
 * Protocol facts the SDK depends on are commented where they are implemented.
 */

const rhea = require('rhea');
const crypto = require('crypto');
const fs = require('fs');
const terminus = require('rhea/lib/terminus.js');
const host = require('./host.js');

const types = rhea.types;
const amqpMessage = rhea.message;

// rhea (3.x) writes the dispositions of consecutive incoming deliveries as one range and, for a
// run's first two deliveries, does not compare their outcomes: a refused transfer next to an
// accepted one can reach the client as accepted (the send "succeeds" and the message is gone),
// or the reverse. With SEND_FAULTS set, incoming dispositions are written one per delivery.
const rheaFrames = require('rhea/lib/frames.js');
function separateDispositions(session) {
  const proto = session && session.incoming && Object.getPrototypeOf(session.incoming);
  if (!proto || proto.sbfakeSeparate) return;
  const process = proto.process;
  proto.process = function (s) {
    const ranged = [];
    for (const d of this.updated) {
      if (!d.link.connection.container.sbfakeSeparate) { ranged.push(d); continue; }
      d.link.session.output(rheaFrames.disposition({ role: d.link.is_receiver(), first: d.id, last: d.id, state: d.state, settled: d.settled }));
    }
    this.updated = ranged;
    return process.call(this, s);
  };
  proto.sbfakeSeparate = true;
}

// go-amqp (v1.7.0) gives up on a session whose begin is not answered before the caller's
// deadline and, when it next opens a session, writes an end for that channel. Its writer drops
// frames whose deadline has already passed, so under load the begin itself may never have been
// written: the end then names a channel with no session. rhea treats that as a protocol error
// and drops the whole connection, which frees every session and message lock of that client and
// fails its sends in flight (redeliveries and duplicate sends a test cannot tell from real
// ones). There is nothing to end, so the stand-in ignores such an end and says so in its log.
const RheaConnection = require('rhea/lib/connection.js');
const rheaOnEnd = RheaConnection.prototype.on_end;
RheaConnection.prototype.on_end = function (frame) {
  if (!this.remote_channel_map[frame.channel]) {
    const log = (this.container && this.container.sbfakeLog) || console.error;
    log(`sbfake: ignored end on channel ${frame.channel}, where no session was begun`);
    return;
  }
  rheaOnEnd.call(this, frame);
};

// ---------------------------------------------------------------------------------------------
// One broker: the entities of a topology served on one port. env holds its settings (the
// environment variables above); io receives its log lines (log), its port once it listens
// (listening) and a failure to listen (failed). It returns { close }.

function startBroker(env, io) {
  // Configuration

  function loadTopology() {
    let text = env.TOPOLOGY;
    if (!text && env.TOPOLOGY_FILE) text = fs.readFileSync(env.TOPOLOGY_FILE, 'utf8');
    return text ? JSON.parse(text) : {};
  }

  const topology = loadTopology();
  const LOCK_MS = Number(topology.lockMs || env.LOCK_MS || 60000);
  const MAX_DELIVERY = Number(topology.maxDeliveryCount || env.MAX_DELIVERY || 10);
  const DEBUG = env.DEBUG_FAKE === '1';
  const MAX_MESSAGE_SIZE = 1024 * 1024;
  const MAX_FORWARD_HOPS = 4;
  const SESSION_FILTER = 'com.microsoft:session-filter';
  const SESSION_FILTER_CODE = 0x137000000c; // Microsoft domain 0x137, descriptor 0xC
  const BATCH_FORMAT = 0x80013700;

  function debug(...args) { if (DEBUG) io.log(['[sbfake]', ...args].join(' ')); }

  // Send faults (SEND_FAULTS; see the top of the file). Off unless configured; a host's SET
  // command replaces them (configure below).
  function parseSendFaults(raw) {
    if (!raw) return null;
    const f = JSON.parse(raw);
    let a = (Number(f.seed) >>> 0) || 1;
    const next = () => { // mulberry32
      a = (a + 0x6D2B79F5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    return {
      rate: Number(f.rate || 0),
      entities: new Set((f.entities || []).map((x) => String(x).toLowerCase())),
      match: f.match || [],
      condition: f.condition || 'amqp:not-allowed',
      next,
    };
  }
  let sendFaults = parseSendFaults(env.SEND_FAULTS);

  // faultSend reports whether one of msgs (parsed, sent to entity e) is refused by SEND_FAULTS.
  function faultSend(e, msgs) {
    if (!sendFaults || !e || !sendFaults.entities.has(e.name.toLowerCase())) return false;
    let refused = false;
    for (const m of msgs) {
      if (sendFaults.match.length && !sendFaults.match.some((r) => matches(r, m))) continue;
      if (sendFaults.next() < sendFaults.rate) {
        refused = true;
        io.log(`sbfake: injected send fault (${e.name}, To=${appProp(m, 'To')})`);
      }
    }
    return refused;
  }

  // ---------------------------------------------------------------------------------------------
  // Entities. Every entity (queue, subscription, dead-letter queue) is a message store;
  // a topic only routes. Keys are lower-cased addresses.

  const entities = new Map();
  let lastSequence = 0;
  const scheduled = []; // {seq, at, target, msg}

  function newStore(name, opts) {
    const e = {
      name, kind: opts.kind || 'queue',
      requiresSession: Boolean(opts.requiresSession),
      maxDelivery: opts.maxDeliveryCount || MAX_DELIVERY,
      rules: opts.rules || [], forwardTo: opts.forwardTo || '',
      msgs: [], links: new Set(), sessions: new Map(), waiters: [],
    };
    entities.set(name.toLowerCase(), e);
    if (!opts.isDLQ) {
      e.dlq = newStore(name + '/$DeadLetterQueue', { isDLQ: true, maxDeliveryCount: Infinity });
    }
    return e;
  }

  for (const q of topology.queues || []) newStore(q.name, q);
  for (const t of topology.topics || []) {
    const topic = { name: t.name, kind: 'topic', subs: [] };
    entities.set(t.name.toLowerCase(), topic);
    for (const s of t.subscriptions || []) {
      topic.subs.push(newStore(`${t.name}/Subscriptions/${s.name}`, { ...s, kind: 'subscription' }));
    }
  }

  // lookup returns the entity for an address, creating an implicit queue for an unknown one.
  function lookup(address) {
    const key = String(address || '').replace(/^\/+/, '').toLowerCase();
    if (!key) return null;
    if (entities.has(key)) return entities.get(key);
    const m = /^(.*)\/subscriptions\/[^/]+(\/\$deadletterqueue)?$/.exec(key);
    if (m && entities.has(m[1])) return null; // undeclared subscription of a declared topic
    const dlq = /^(.*)\/\$deadletterqueue$/.exec(key);
    if (dlq) return (lookup(dlq[1]) || {}).dlq || null;
    debug('implicit queue', key);
    return newStore(address, {});
  }

  // ---------------------------------------------------------------------------------------------
  // Messages are kept as AMQP sections, never as decoded JS values: rhea's decoding loses AMQP
  // types (int vs long, …) and the SDK type-asserts what it receives. Application properties and
  // message annotations are lists of [keyTyped, valueTyped] so the broker can add keys without
  // touching the others; the body (data/sequence/value sections and footer) stays raw bytes.

  const SECTION = { header: 0x70, deliveryAnnotations: 0x71, annotations: 0x72, properties: 0x73, appProps: 0x74 };
  const SYMBOLIC_SECTION = {
    'amqp:header:list': 0x70, 'amqp:delivery-annotations:map': 0x71, 'amqp:message-annotations:map': 0x72,
    'amqp:properties:list': 0x73, 'amqp:application-properties:map': 0x74,
  };
  const P = { messageId: 0, to: 2, correlationId: 5, groupId: 10 }; // indexes in the properties list

  function isNull(t) { return t === undefined || t === null || (t.type && t.type.typecode === 0x40); }
  function pairs(flat) { const out = []; for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i], flat[i + 1]]); return out; }
  function flatten(ps) { return ps.flat(); }
  function keyOf(k) { return String(k.value); }

  function parseMessage(buf) {
    const r = new types.Reader(buf);
    const m = { header: [], annotations: [], props: [], appProps: [], body: [] };
    while (r.remaining()) {
      const start = r.position;
      const s = r.read();
      const d = s.descriptor && s.descriptor.value;
      switch (typeof d === 'number' ? d : SYMBOLIC_SECTION[d]) {
        case SECTION.header: m.header = s.value; break;
        case SECTION.deliveryAnnotations: break; // per hop: not stored
        case SECTION.annotations: m.annotations = pairs(s.value); break;
        case SECTION.properties: m.props = s.value.slice(); break;
        case SECTION.appProps: m.appProps = pairs(s.value); break;
        default: m.body.push(buf.slice(start, r.position)); // body sections and footer, verbatim
      }
    }
    m.body = Buffer.concat(m.body);
    return m;
  }

  function cloneMessage(m) {
    return { header: m.header, annotations: m.annotations.slice(), props: m.props.slice(), appProps: m.appProps.slice(), body: m.body };
  }

  function propString(m, i) { const v = m.props[i]; return isNull(v) ? null : String(v.value); }
  function sessionIdOf(m) { return propString(m, P.groupId); }

  function appProp(m, name) {
    const p = m.appProps.find(([k]) => keyOf(k) === name);
    return !p || isNull(p[1]) ? null : types.unwrap(p[1]);
  }
  function setAppProp(m, name, typed) {
    const i = m.appProps.findIndex(([k]) => keyOf(k) === name);
    if (i >= 0) m.appProps[i] = [m.appProps[i][0], typed];
    else m.appProps.push([types.wrap_string(name), typed]);
  }
  function annotation(m, name) {
    const p = m.annotations.find(([k]) => keyOf(k) === name);
    return p && !isNull(p[1]) ? p[1].value : undefined;
  }

  function newGuid() { return crypto.randomUUID(); }

  // encode writes a stored message for delivery: a fresh header (delivery-count = earlier failed
  // deliveries; the SDK reports it + 1), the broker annotations with the exact AMQP types the SDK
  // type-asserts (sequence number: long; times: timestamp; deadletter source: string), then the
  // untouched properties, application properties and body.
  const BROKER_ANNOTATIONS = new Set(['x-opt-sequence-number', 'x-opt-enqueued-time', 'x-opt-locked-until',
    'x-opt-message-state', 'x-opt-deadletter-source', 'x-opt-lock-token']);

  function encode(msg, opts = {}) {
    const w = new types.Writer();
    const h = msg.header;
    w.write(types.described(types.wrap_ulong(SECTION.header),
      types.wrap_list([h[0] || null, h[1] || null, h[2] || null, null, types.wrap_uint(msg.dc)])));
    if (opts.lockToken) {
      w.write(types.described(types.wrap_ulong(SECTION.deliveryAnnotations),
        types.wrap_symbolic_map({ 'x-opt-lock-token': types.wrap_uuid(opts.lockToken) })));
    }
    const ann = msg.annotations.filter(([k]) => !BROKER_ANNOTATIONS.has(keyOf(k)));
    const add = (k, v) => ann.push([types.wrap_symbol(k), v]);
    add('x-opt-sequence-number', types.Long(msg.seq)); // must decode as int64
    add('x-opt-enqueued-time', types.wrap_timestamp(msg.enqueued));
    if (opts.lockedUntil) add('x-opt-locked-until', types.wrap_timestamp(opts.lockedUntil));
    if (msg.deferred) add('x-opt-message-state', types.wrap_int(1));
    if (msg.deadLetterSource) add('x-opt-deadletter-source', types.wrap_string(msg.deadLetterSource));
    w.write(types.described(types.wrap_ulong(SECTION.annotations), types.Map32(flatten(ann))));
    w.write(types.described(types.wrap_ulong(SECTION.properties), types.wrap_list(msg.props)));
    if (msg.appProps.length) {
      w.write(types.described(types.wrap_ulong(SECTION.appProps), types.Map32(flatten(msg.appProps))));
    }
    w.write_bytes(msg.body);
    return w.toBuffer();
  }

  // ---------------------------------------------------------------------------------------------
  // Routing and storage

  function matches(rule, m) {
    for (const [name, want] of Object.entries(rule.equals || {})) {
      const v = appProp(m, name);
      if (v === null || String(v) !== String(want)) return false;
    }
    for (const name of rule.isNull || []) if (appProp(m, name) !== null) return false;
    for (const name of rule.notNull || []) if (appProp(m, name) === null) return false;
    return true;
  }

  // send delivers a parsed message to an address: a topic fans out to its subscriptions, a
  // forwarding subscription passes its copy on, anything else stores it.
  function send(target, m, hops = 0) {
    if (hops > MAX_FORWARD_HOPS) throw new Error('forwarding chain longer than ' + MAX_FORWARD_HOPS);
    if (target.kind === 'topic') {
      for (const sub of target.subs) {
        const rule = sub.rules.length ? sub.rules.find((r) => matches(r, m)) : {};
        if (!rule) continue;
        const copy = cloneMessage(m);
        for (const [name, value] of Object.entries(rule.set || {})) {
          setAppProp(copy, name, types.wrap_string(value === 'newid()' ? newGuid() : String(value)));
        }
        if (sub.forwardTo) send(lookup(sub.forwardTo), copy, hops + 1);
        else store(sub, copy);
      }
      return;
    }
    store(target, m);
  }

  function store(e, m, keep) {
    if (!keep) { m.seq = ++lastSequence; m.enqueued = Date.now(); m.dc = 0; }
    m.sid = sessionIdOf(m);
    m.lock = null;
    m.deferred = Boolean(m.deferred);
    e.msgs.push(m);
    debug('stored', e.name, 'seq', m.seq, 'session', m.sid);
    wake(e);
  }

  function remove(e, m) {
    const i = e.msgs.indexOf(m);
    if (i >= 0) e.msgs.splice(i, 1);
  }

  // accept handles a message a client sent (already parsed). A missing message-id is assigned
  // here, once, so every fan-out copy shares it, as Service Bus does.
  function accept(e, m) {
    if (isNull(m.props[P.messageId])) m.props[P.messageId] = types.wrap_string(crypto.randomBytes(16).toString('hex'));
    const at = annotation(m, 'x-opt-scheduled-enqueue-time');
    if (at && at.getTime() > Date.now()) {
      const seq = ++lastSequence;
      scheduled.push({ seq, at: at.getTime(), target: e, msg: m });
      return seq;
    }
    send(e, m);
    return m.seq !== undefined ? m.seq : lastSequence; // a topic's copies have their own numbers
  }

  function deadLetter(e, m, reason, description) {
    remove(e, m);
    if (reason != null) setAppProp(m, 'DeadLetterReason', types.wrap_string(String(reason)));
    if (description != null) setAppProp(m, 'DeadLetterErrorDescription', types.wrap_string(String(description)));
    m.deadLetterSource = e.name;
    m.deferred = false;
    debug('dead-lettered', e.name, 'seq', m.seq, reason);
    store(e.dlq, m, true);
  }

  // abandon returns a message after a failed delivery: the count goes up and, at the entity's
  // max delivery count, the message moves to the dead-letter queue.
  function abandon(e, m, propsToModify) {
    m.lock = null;
    m.dc++;
    for (const [k, v] of Object.entries(propsToModify || {})) setAppProp(m, k, types.wrap(v));
    if (m.dc >= e.maxDelivery) {
      deadLetter(e, m, 'MaxDeliveryCountExceeded', `Message could not be consumed after ${m.dc} delivery attempts.`);
    } else {
      wake(e);
    }
  }

  function release(e, m) { m.lock = null; wake(e); }

  // ---------------------------------------------------------------------------------------------
  // Delivery to receivers

  // unsent counts deliveries rhea has queued on the link's session but not yet written. rhea only
  // lowers link.credit when it writes a transfer, so without this the fake over-delivers (and
  // locks) more messages than the client granted credit for.
  function unsent(l) {
    const o = l.session.outgoing;
    let n = 0;
    for (let id = o.next_pending_delivery; id < o.next_delivery_id; id++) {
      const d = o.deliveries.by_id(id);
      if (d && d.link === l) n++;
    }
    return n;
  }

  function deliverable(e, l, m) {
    return !m.lock && !m.deferred && (!e.requiresSession || m.sid === l.sessionId);
  }

  function pump(e) {
    for (const l of e.links) {
      if (!l.is_open() || l.waiting) continue;
      let credit = l.credit - unsent(l);
      while (credit > 0) {
        const m = e.msgs.find((x) => deliverable(e, l, x));
        if (!m) break;
        deliver(e, l, m);
        credit--;
      }
      if (l._draining && credit > 0) l.set_drained(true);
    }
  }

  // The lock token is the 16-byte delivery tag. The SDK presents it (and sends it back in
  // $management requests) with bytes 0-3, 4-5 and 6-7 reversed, .NET Guid style.
  function dotnetSwap(b) {
    const s = Buffer.from(b);
    s.writeUInt32BE(b.readUInt32LE(0), 0);
    s.writeUInt16BE(b.readUInt16LE(4), 4);
    s.writeUInt16BE(b.readUInt16LE(6), 6);
    return s;
  }

  function lockUntil(e, l) {
    return e.requiresSession ? sessionOf(e, l.sessionId).lockedUntil : Date.now() + LOCK_MS;
  }

  function deliver(e, l, m) {
    const tag = crypto.randomBytes(16);
    const receiveAndDelete = l.local.attach.snd_settle_mode === 1;
    const until = lockUntil(e, l);
    if (receiveAndDelete) remove(e, m);
    else m.lock = { key: dotnetSwap(tag).toString('hex'), link: l, until: e.requiresSession ? Infinity : until };
    const d = l.send(encode(m, { lockedUntil: receiveAndDelete ? 0 : until }), tag, 0);
    if (!receiveAndDelete) { m.lock.delivery = d; d.fake = { e, m }; }
    debug('delivered', e.name, 'seq', m.seq, 'dc', m.dc);
  }

  // wake re-runs delivery for an entity soon (coalesced), and hands free sessions to waiters.
  function wake(e) {
    if (e.woken) return;
    e.woken = true;
    setImmediate(() => { e.woken = false; grantWaiters(e); pump(e); });
  }

  // ---------------------------------------------------------------------------------------------
  // Sessions

  function sessionOf(e, sid) {
    let s = e.sessions.get(sid);
    if (!s) { s = { link: null, state: null, lockedUntil: 0 }; e.sessions.set(sid, s); }
    return s;
  }

  function freeSession(e) {
    for (const m of e.msgs) {
      if (m.sid !== null && !m.lock && !m.deferred && !sessionOf(e, m.sid).link) return m.sid;
    }
    return null;
  }

  function lockSession(e, l, sid) {
    const s = sessionOf(e, sid);
    s.link = l;
    s.lockedUntil = Date.now() + LOCK_MS;
    l.sessionId = sid;
    echoTerminus(l, sid);
    // Optional link property the SDK reads for SessionReceiver.LockedUntil: .NET ticks as a long.
    const ticks = Buffer.alloc(8);
    ticks.writeBigInt64BE((BigInt(s.lockedUntil) + 62135596800000n) * 10000n);
    l.local.attach.properties = { 'com.microsoft:locked-until-utc': types.wrap_long(ticks) };
    debug('session locked', e.name, sid);
  }

  // A held attach is one whose reply rhea must not send yet (AcceptNextSession waiting for a
  // session). rhea queues the reply as an "open request" before it emits sender_open; taking the
  // request back holds it, giving it back (plus _register) sends it.
  function holdAttach(l) { l.state.open_requests--; l.waiting = true; }
  function releaseAttach(l) { l.waiting = false; l.state.open_requests++; l.connection._register(); }

  // refuse answers an attach with a null source and then a detach carrying the error, which is
  // how the SDK expects a refusal (com.microsoft:timeout → CodeTimeout).
  function refuse(l, condition, description) {
    l.local.attach.source = null;
    l.local.attach.target = null;
    l.close({ condition, description });
  }

  function grantWaiters(e) {
    while (e.waiters.length) {
      const sid = freeSession(e);
      if (sid === null) return;
      const w = e.waiters.shift();
      clearTimeout(w.timer);
      lockSession(e, w.link, sid);
      releaseAttach(w.link);
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Links

  // Attach replies must echo a non-null source and target (go-amqp reads a null terminus as a
  // refusal), and the settle modes. On a session link the source must carry the session filter
  // with the locked session id as a string, or the SDK rejects the link.
  function echoTerminus(l, sessionId) {
    const a = l.remote.attach;
    const src = a.source || {};
    const fields = { address: src.address };
    if (sessionId !== undefined) {
      fields.filter = { [SESSION_FILTER]: types.described(types.wrap_ulong(SESSION_FILTER_CODE), types.wrap_string(sessionId)) };
    }
    l.local.attach.source = terminus.source(fields).described();
    l.local.attach.target = terminus.target({ address: (a.target || {}).address }).described();
    l.local.attach.snd_settle_mode = a.snd_settle_mode;
    l.local.attach.rcv_settle_mode = a.rcv_settle_mode;
  }

  function isRpcAddress(addr) { return addr === '$cbs' || /\/\$management$/i.test(addr || ''); }

  const container = rhea.create_container({ id: 'sbfake' });
  container.sbfakeLog = io.log;
  container.sbfakeSeparate = Boolean(sendFaults);

  // A client receiver: our side sends.
  container.on('sender_open', (ctx) => {
    const l = ctx.sender;
    const src = l.remote.attach.source || {};
    if (isRpcAddress(src.address)) {
      // Reply link of a request/response pair ($cbs or <entity>/$management); replies are routed
      // by the request's reply-to, matched against this link's target address.
      echoTerminus(l);
      const conn = ctx.connection;
      conn.replyTo = conn.replyTo || new Map();
      conn.replyTo.set((l.remote.attach.target || {}).address, l);
      return;
    }
    const e = lookup(src.address);
    if (!e) return refuse(l, 'amqp:not-found', `entity '${src.address}' was not declared in the topology`);
    if (e.kind === 'topic') return refuse(l, 'amqp:not-allowed', 'cannot receive from a topic');
    const filter = (src.filter || {})[SESSION_FILTER];
    if (filter === undefined && e.requiresSession) {
      return refuse(l, 'amqp:not-allowed', `entity '${e.name}' requires sessions: use a session receiver`);
    }
    if (filter !== undefined && !e.requiresSession) {
      return refuse(l, 'amqp:not-allowed', `entity '${e.name}' does not require sessions`);
    }
    l.entity = e;
    if (filter === undefined) {
      echoTerminus(l);
    } else if (filter.value !== null) {
      const sid = String(filter.value);
      if (sessionOf(e, sid).link) {
        return refuse(l, 'com.microsoft:session-cannot-be-locked', `session '${sid}' is locked by another receiver`);
      }
      lockSession(e, l, sid);
    } else {
      const sid = freeSession(e);
      if (sid !== null) {
        lockSession(e, l, sid);
      } else {
        // AcceptNextSession: wait up to the client's timeout, replying a little early so the
        // refusal reaches the client before its own context deadline.
        holdAttach(l);
        const props = l.remote.attach.properties || {};
        const timeout = Number(props['com.microsoft:timeout'] || 60000);
        const w = { link: l };
        w.timer = setTimeout(() => {
          e.waiters.splice(e.waiters.indexOf(w), 1);
          e.links.delete(l);
          releaseAttach(l);
          refuse(l, 'com.microsoft:timeout', 'no unlocked session is available');
        }, Math.max(0, timeout - Math.min(50, timeout / 10)));
        e.waiters.push(w);
        debug('waiting for a session', e.name);
      }
    }
    e.links.add(l);
    wake(e);
  });

  // A client sender: our side receives. Client senders need max-message-size in the reply or
  // the SDK computes a zero batch size.
  container.on('receiver_open', (ctx) => {
    const l = ctx.receiver;
    separateDispositions(l.session); // one disposition per delivery while send faults are on
    const addr = (l.remote.attach.target || {}).address;
    if (!isRpcAddress(addr)) {
      const e = lookup(addr);
      if (!e) return refuse(l, 'amqp:not-found', `entity '${addr}' was not declared in the topology`);
      l.entity = e;
    }
    echoTerminus(l);
    l.local.attach.max_message_size = MAX_MESSAGE_SIZE;
  });

  container.on('sendable', (ctx) => { if (ctx.sender.entity) pump(ctx.sender.entity); });
  container.on('sender_draining', (ctx) => { if (ctx.sender.entity) pump(ctx.sender.entity); });

  // linkGone cleans up after a receiver link closes or its connection/session goes away.
  // Non-session message locks survive until they expire (a late settlement through $management
  // still works, as on Service Bus); a session's locked messages go back without a delivery
  // count increase and the session is free again.
  function linkGone(l) {
    const e = l.entity;
    if (!e || !e.links || !e.links.delete(l)) return;
    const w = e.waiters.find((x) => x.link === l);
    if (w) { clearTimeout(w.timer); e.waiters.splice(e.waiters.indexOf(w), 1); }
    if (l.sessionId !== undefined) {
      const s = sessionOf(e, l.sessionId);
      if (s.link === l) s.link = null;
      for (const m of e.msgs) if (m.lock && m.lock.link === l) m.lock = null;
      debug('session released', e.name, l.sessionId);
    }
    wake(e);
  }

  function forLinks(pred) {
    for (const e of entities.values()) for (const l of [...(e.links || [])]) if (pred(l)) linkGone(l);
  }
  container.on('sender_close', (ctx) => linkGone(ctx.sender));
  container.on('session_close', (ctx) => forLinks((l) => l.session === ctx.session));
  container.on('connection_close', (ctx) => forLinks((l) => l.connection === ctx.connection));
  container.on('disconnected', (ctx) => forLinks((l) => l.connection === ctx.connection));
  container.on('error', (err) => debug('error', err && err.message));

  // ---------------------------------------------------------------------------------------------
  // Settlement of deliveries on receiver links. The client's disposition is unsettled
  // (rcv-settle-mode second): the broker must answer with a *settled* disposition or
  // CompleteMessage hangs. rhea never frees a delivery the peer has not settled, so the fake
  // marks it remote-settled by hand (else the 2048-entry session buffer fills up).

  function answer(d, state) {
    d.update(true, state);
    d.remote_settled = true;
  }

  const lockLost = () => amqpMessage.rejected({
    error: { condition: 'com.microsoft:message-lock-lost', description: 'the lock on the message was lost' },
  }).described();

  function settleOutcome(ctx, kind) {
    const d = ctx.delivery;
    if (!d.fake) return; // replies on $cbs/$management links
    const { e, m } = d.fake;
    if (!m.lock || m.lock.delivery !== d) return answer(d, lockLost());
    const state = d.remote_state;
    switch (kind) {
      case 'accepted': remove(e, m); wake(e); break;
      case 'released': release(e, m); break;
      case 'modified':
        if (state.undeliverable_here) { m.lock = null; m.deferred = true; } // DeferMessage
        else abandon(e, m, state.message_annotations); // AbandonMessage; annotations = properties to modify
        break;
      case 'rejected': { // DeadLetterMessage: reason/description ride in the error info
        const info = (state.error && state.error.info) || {};
        deadLetter(e, m, info.DeadLetterReason, info.DeadLetterErrorDescription);
        // Answer rejected *without* an error: go-amqp turns an error in the broker's rejected
        // state into a failed settlement, and the SDK would retry the dead-lettering.
        return answer(d, amqpMessage.rejected({}).described());
      }
    }
    answer(d, state.described());
  }
  for (const kind of ['accepted', 'released', 'modified', 'rejected']) {
    container.on(kind, (ctx) => settleOutcome(ctx, kind));
  }

  // ---------------------------------------------------------------------------------------------
  // Incoming messages: entity sends, $cbs claims and $management requests.

  // rhea decodes messages before handing them over; keep the raw bytes alongside.
  const decode = amqpMessage.decode;
  amqpMessage.decode = function (buf) {
    const msg = decode(buf);
    Object.defineProperty(msg, 'raw', { value: buf });
    return msg;
  };

  container.on('message', (ctx) => {
    const l = ctx.receiver;
    const addr = (l.remote.attach.target || {}).address;
    try {
      if (addr === '$cbs') { ctx.delivery.accept(); return reply(ctx, 200, 'OK'); } // any token is fine
      if (isRpcAddress(addr)) { ctx.delivery.accept(); return management(ctx, addr.replace(/\/\$management$/i, '')); }
      const e = l.entity;
      // A batch (message-format 0x80013700) is an envelope whose data sections each hold one
      // complete encoded message.
      const raws = ctx.format === BATCH_FORMAT ? batchMessages(ctx.message) : [ctx.message.raw];
      const msgs = raws.map(parseMessage);
      if (e.kind === 'queue' && e.requiresSession && msgs.some((m) => sessionIdOf(m) === null)) {
        return ctx.delivery.reject({ condition: 'amqp:not-allowed', description: `entity '${e.name}' requires a SessionId on every message` });
      }
      if (faultSend(e, msgs)) {
        return ctx.delivery.reject({ condition: sendFaults.condition, description: 'sbfake: injected send fault' });
      }
      for (const m of msgs) accept(e, m);
      ctx.delivery.accept();
    } catch (err) {
      debug('message handling failed', err && err.stack);
      ctx.delivery.reject({ condition: 'amqp:internal-error', description: String(err && err.message) });
    }
  });

  function batchMessages(buf) {
    const out = [];
    const r = new types.Reader(buf);
    while (r.remaining()) {
      const s = r.read();
      if (s.descriptor && s.descriptor.value === 0x75) out.push(s.value);
    }
    return out;
  }

  // reply answers a request on the link whose target is the request's reply-to. status-code must
  // be an AMQP int (int32): rhea would encode a plain JS number as uint, and the SDK then rejects
  // the reply and retries until its deadline.
  function reply(ctx, code, description, body) {
    const req = ctx.message;
    const link = ctx.connection.replyTo && ctx.connection.replyTo.get(req.reply_to);
    if (!link) return debug('no reply link for', req.reply_to);
    link.send({
      correlation_id: req.message_id,
      application_properties: { 'status-code': types.wrap_int(code), 'status-description': description },
      body,
    });
  }

  const hex = (b) => Buffer.from(b).toString('hex');
  const longArray = (ns) => types.wrap_array(ns, 0x81);
  const timestampArray = (ts) => types.wrap_array(ts, 0x83);

  function findLocked(e, tokens) {
    const found = [];
    for (const t of tokens || []) {
      const m = e.msgs.find((x) => x.lock && x.lock.key === hex(t));
      if (!m) return null;
      found.push(m);
    }
    return found;
  }

  // Unknown operations get 404: the SDK fails fast on it, while 501 or 400 make it reset the
  // connection and retry until the caller's deadline.
  function management(ctx, address) {
    const e = lookup(address);
    const op = (ctx.message.application_properties || {}).operation;
    const body = ctx.message.body || {};
    // A topic's management link takes only scheduling, as Service Bus's does.
    const topicOp = op === 'com.microsoft:schedule-message' || op === 'com.microsoft:cancel-scheduled-message';
    if (!e || (e.kind === 'topic' && !topicOp)) return reply(ctx, 404, `no entity '${address}'`);
    const now = Date.now();
    switch (op) {
      case 'com.microsoft:renew-lock': { // the SDK asserts expirations is []time.Time
        const ms = findLocked(e, body['lock-tokens']);
        if (!ms) return reply(ctx, 410, 'lock lost');
        for (const m of ms) m.lock.until = Math.max(m.lock.until, now + LOCK_MS);
        return reply(ctx, 200, 'OK', { expirations: timestampArray(ms.map(() => now + LOCK_MS)) });
      }
      case 'com.microsoft:update-disposition': {
        const ms = findLocked(e, body['lock-tokens']);
        if (!ms) return reply(ctx, 410, 'lock lost');
        for (const m of ms) {
          switch (body['disposition-status']) {
            case 'completed': remove(e, m); break;
            case 'abandoned': abandon(e, m, body['properties-to-modify']); break;
            case 'defered': m.lock = null; m.deferred = true; break;
            case 'suspended': deadLetter(e, m, body['deadletter-reason'], body['deadletter-description']); break;
          }
        }
        wake(e);
        return reply(ctx, 200, 'OK', {});
      }
      case 'com.microsoft:renew-session-lock': {
        const s = sessionOf(e, String(body['session-id']));
        s.lockedUntil = now + LOCK_MS;
        return reply(ctx, 200, 'OK', { expiration: types.wrap_timestamp(s.lockedUntil) });
      }
      case 'com.microsoft:get-session-state': {
        const s = sessionOf(e, String(body['session-id']));
        return reply(ctx, 200, 'OK', { 'session-state': s.state ? types.wrap_binary(s.state) : null });
      }
      case 'com.microsoft:set-session-state': {
        sessionOf(e, String(body['session-id'])).state = body['session-state'] ? Buffer.from(body['session-state']) : null;
        return reply(ctx, 200, 'OK', {});
      }
      case 'com.microsoft:peek-message': {
        const from = Number(body['from-sequence-number'] || 0);
        const sid = body['session-id'];
        const ms = e.msgs.filter((m) => m.seq >= from && (sid == null || m.sid === sid)).slice(0, Number(body['message-count'] || 1));
        if (!ms.length) return reply(ctx, 204, 'No Content');
        return reply(ctx, 200, 'OK', { messages: ms.map((m) => ({ message: types.wrap_binary(encode(m)) })) });
      }
      case 'com.microsoft:receive-by-sequence-number': {
        const ms = [];
        for (const seq of body['sequence-numbers'] || []) {
          const m = e.msgs.find((x) => x.seq === Number(seq) && x.deferred);
          if (!m) return reply(ctx, 404, `deferred message ${seq} not found`); // 204 would hang the SDK
          ms.push(m);
        }
        const out = ms.map((m) => {
          // Here the lock token travels as a uuid delivery annotation and comes back unswapped.
          const token = crypto.randomBytes(16);
          const until = now + LOCK_MS;
          const encoded = encode(m, { lockToken: token, lockedUntil: until });
          if (Number(body['receiver-settle-mode']) === 0) remove(e, m); // ReceiveAndDelete
          else m.lock = { key: hex(token), link: null, until };
          return { 'lock-token': types.wrap_uuid(token), message: types.wrap_binary(encoded) };
        });
        return reply(ctx, 200, 'OK', { messages: out });
      }
      case 'com.microsoft:schedule-message': { // the SDK asserts sequence-numbers is []int64
        const parsed = (body.messages || []).map((x) => parseMessage(Buffer.from(x.message)));
        if (faultSend(e, parsed)) return reply(ctx, 404, 'sbfake: injected send fault');
        const seqs = parsed.map((m) => accept(e, m));
        return reply(ctx, 200, 'OK', { 'sequence-numbers': longArray(seqs) });
      }
      case 'com.microsoft:cancel-scheduled-message': {
        const cancel = new Set((body['sequence-numbers'] || []).map(Number));
        for (let i = scheduled.length - 1; i >= 0; i--) if (cancel.has(scheduled[i].seq)) scheduled.splice(i, 1);
        return reply(ctx, 200, 'OK', {});
      }
      default:
        return reply(ctx, 404, `sbfake does not implement ${op}`);
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Timers: message lock expiry (counts as a failed delivery) and scheduled messages.

  const timer = setInterval(() => {
    const now = Date.now();
    for (const e of entities.values()) {
      for (const m of [...(e.msgs || [])]) {
        if (m.lock && m.lock.until < now) { debug('lock expired', e.name, 'seq', m.seq); abandon(e, m); }
      }
    }
    for (let i = scheduled.length - 1; i >= 0; i--) {
      const s = scheduled[i];
      if (s.at <= now) { scheduled.splice(i, 1); send(s.target, s.msg); }
    }
  }, 100).unref();


  // noDelay matters: with Nagle on, each of the ~6 round trips of a first send stalls ~40 ms.
  const server = container.listen({
    host: '127.0.0.1', port: Number(env.PORT || 0), noDelay: true,
    sender_options: { treat_modified_as_released: false }, // else defer and abandon look alike
    receiver_options: { autoaccept: false },
  });
  const closeServer = host.closer(server);
  server.on('listening', () => io.listening(server.address().port));
  server.on('error', (err) => io.failed(err));

  return {
    // configure applies the settings a host's SET command names; only SEND_FAULTS can change
    // (absent or empty: no more faults).
    configure(settings) {
      const next = parseSendFaults(settings.SEND_FAULTS);
      sendFaults = next;
      container.sbfakeSeparate = Boolean(next);
    },
    close() {
      clearInterval(timer);
      for (const e of entities.values()) for (const w of e.waiters || []) clearTimeout(w.timer);
      closeServer();
    },
  };
}

// ---------------------------------------------------------------------------------------------
// The process: one broker configured by the environment, or (TESTENV_HOST=1) a host of brokers that
// starts and stops them on commands (see host.js).

if (process.env.TESTENV_HOST === '1') {
  host.runHost(startBroker);
} else {
  startBroker(process.env, {
    log: (text) => console.error(text),
    listening: (port) => console.log('LISTENING ' + port),
    failed: (err) => { console.error('sbfake: ' + err.message); process.exit(1); },
  });
}
