'use strict';
/*
 * host.js — the host mode the stand-ins share (TESTENV_HOST=1): one Node process runs many instances
 * of a stand-in, each started and stopped by a command on stdin, so a test package pays one Node
 * start-up instead of one per test. Test infrastructure only.
 *
 *   START <id> <settings JSON>   → "LISTENING <id> <port>" or "FAILED <id> <message>"
 *   STOP <id>                    → "STOPPED <id>"
 *   SET <id> <settings JSON>     → "CONFIGURED <id>" or "FAILED <id> <message>": changes a running
 *                                  instance's settings, as far as its configure(settings) allows
 *
 * The settings are the environment variables the stand-in's own process would read. An instance's
 * log lines come out as "LOG <id> <line>". The host prints "READY" first and exits when stdin closes.
 */

const readline = require('readline');

// runHost serves the commands with start(settings, io), which starts one instance and returns
// { close() } and, when its settings can change while it runs, configure(settings); io has
// log(text), listening(port) and failed(err).
function runHost(start) {
  const instances = new Map();
  const say = (line) => process.stdout.write(line + '\n');
  const oneLine = (err) => String((err && err.message) || err).replace(/\n/g, ' ');
  const lines = readline.createInterface({ input: process.stdin });
  lines.on('line', (line) => {
    const [op, id] = line.split(' ', 2);
    if (op === 'START') {
      try {
        const settings = JSON.parse(line.slice(op.length + id.length + 2));
        instances.set(id, start(settings, {
          log: (text) => { for (const l of String(text).split('\n')) say(`LOG ${id} ${l}`); },
          listening: (port) => say(`LISTENING ${id} ${port}`),
          failed: (err) => { instances.delete(id); say(`FAILED ${id} ${oneLine(err)}`); },
        }));
      } catch (err) {
        say(`FAILED ${id} ${oneLine(err)}`);
      }
    } else if (op === 'SET') {
      const instance = instances.get(id);
      try {
        if (!instance || !instance.configure) throw new Error(`instance ${id} cannot be configured`);
        instance.configure(JSON.parse(line.slice(op.length + id.length + 2)));
        say(`CONFIGURED ${id}`);
      } catch (err) {
        say(`FAILED ${id} ${oneLine(err)}`);
      }
    } else if (op === 'STOP') {
      const instance = instances.get(id);
      instances.delete(id);
      if (instance) instance.close();
      say(`STOPPED ${id}`);
    }
  });
  lines.on('close', () => process.exit(0));
  say('READY');
}

// closer tracks a server's open connections and returns close(), which stops the server as
// its process ending would: no new connections, every open one cut.
function closer(server) {
  const sockets = new Set();
  server.on('connection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
  return () => {
    server.close();
    for (const s of sockets) s.destroy();
  };
}

module.exports = { runHost, closer };
