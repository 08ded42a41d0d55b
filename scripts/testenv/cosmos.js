// Local Cosmos DB stand-in for tests: @vercel/cosmosdb-server over plain HTTP
// on 127.0.0.1. Prints "LISTENING <port>" once ready.
//
// Environment:
//   PORT                port to listen on (0 or unset = a free port)
//   COSMOS_CONSISTENCY  default consistency the account reports (default Session)
//   TESTENV_HOST=1      run as a host of servers (accounts), each started and
//                       stopped by a command on stdin with the variables above
//                       as its settings (host.js)
//
// Adjustments to the package (patched before its routes load):
//   - reading a missing document in a partitioned container answers 404 with
//     a Cosmos NotFound body (the package answers 500), and a document in a
//     container partitioned on a nested path (/a/b) is found;
//   - GET / (account properties) advertises http://127.0.0.1:PORT/ as the
//     readable and writable location and reports COSMOS_CONSISTENCY;
//   - a transactional batch behaves as Cosmos DB's: all or nothing (the
//     container's documents are restored when an operation fails), the
//     failing operation answers its own status and every other one 424, the
//     batch answers 207 when it did not commit; operations that name an id
//     (read, replace, delete, patch) take the partition key from the batch's
//     x-ms-documentdb-partitionkey header, as the SDKs send it once there; a
//     written document whose partition key differs from the header's answers
//     400; patch operations are supported;
//   - in a container with time to live on (defaultTtl set), a document whose
//     ttl has run out (counted from its _ts) reads as missing: point reads
//     and batches drop expired documents first;
//   - the front end refuses, before any route, what Cosmos DB's refuses: a
//     request header holding a byte that is not printable ASCII answers
//     400 with no body and closes the connection (the service's HTTP
//     front end refuses such headers), and an
//     x-ms-documentdb-partitionkey header that is not a JSON array of
//     values (such as the Go escapes "\U0001f642", "\x00", "\a" and
//     "\x7f", which JSON does not have) answers 400 BadRequest. Values
//     beyond ASCII arrive as JSON's \uXXXX escapes (surrogate pairs
//     beyond the Basic Multilingual Plane) and name the same partition as
//     the document's own value.
"use strict";

const lib = "@vercel/cosmosdb-server/lib";
const readDocument = require(`${lib}/handler/read-document`);
const readMeta = require(`${lib}/handler/read-meta`);
const batchDocuments = require(`${lib}/handler/batch-documents`);
const documentOperations = require(`${lib}/handler/_document-operations`);
const { patchOperation } = require(`${lib}/handler/_patch-operations`);
const readJSON = require(`${lib}/json`).default;
const getValue = require(`${lib}/utils/get-value`).default;
const { parsePartitionKey } = require(`${lib}/utils/get-partition-from-header`);

const { randomUUID } = require("crypto");
const { runHost, closer } = require("./host.js");

const host = "127.0.0.1";

const notFound = (res) => {
  res.statusCode = 404;
  return {
    code: "NotFound",
    message: "Entity with the specified id does not exist in the system.",
  };
};

const originalReadDocument = readDocument.default;
readDocument.default = (account, req, res, params) => {
  const collection = account.database(params.dbId).collection(params.collId);
  dropExpired(collection);
  const header = req.headers["x-ms-documentdb-partitionkey"];
  if (collection.read() && header) {
    let pk;
    try {
      pk = parsePartitionKey(Array.isArray(header) ? header[0] : header, params.docId);
    } catch (err) {
      pk = undefined;
    }
    if (pk !== undefined) {
      const data = collection.document(params.docId, pk).read();
      if (!data) {
        return notFound(res);
      }
      // The package compares the document's top-level properties with the
      // header, which fails nested partition key paths (/a/b); the lookup
      // above already matched the partition.
      res.statusCode = 200;
      return data;
    }
  }
  return originalReadDocument(account, req, res, params);
};

// dropExpired deletes the documents whose ttl has run out, when the
// container has time to live on (item ttl counts only then). A document's
// own ttl wins over the container's default; -1 never expires.
function dropExpired(collection) {
  const props = collection.read();
  if (!props || props.defaultTtl === undefined || props.defaultTtl === null || props.defaultTtl === 0) {
    return;
  }
  const docs = collection.documents;
  const now = Date.now() / 1e3;
  for (const item of [...docs._data.values()]) {
    const doc = item.read();
    const ttl = doc.ttl !== undefined && doc.ttl !== null ? doc.ttl : props.defaultTtl;
    if (typeof ttl === "number" && ttl > 0 && doc._ts + ttl <= now) {
      docs.delete(doc.id, docs._getPartition(doc));
    }
  }
}

// The container's documents, to restore when a batch fails. Stored
// documents are replaced, never changed in place, so copying the maps is a
// snapshot.
function snapshot(docs) {
  return { data: new Map(docs._data), index: new Map(docs._index), rids: docs._ridCount };
}

function restore(docs, snap) {
  docs._data = snap.data;
  docs._index = snap.index;
  docs._ridCount = snap.rids;
}

const badRequest = (message) => ({ statusCode: 400, body: { code: "BadRequest", message } });

// runOperation applies one batch operation with the batch's partition key.
function runOperation(collection, op, pkHeader, pk) {
  const input = { ...op, partitionKey: pkHeader };
  const docs = collection.documents;
  const samePartition = (body) => {
    const value = getValue(docs._getPartitionKeyPath(), body);
    return value === pk;
  };
  switch (op.operationType) {
    case "Create":
    case "Upsert":
    case "Replace":
      if (!op.resourceBody || typeof op.resourceBody !== "object") {
        return badRequest("missing resourceBody");
      }
      if (!samePartition(op.resourceBody)) {
        return badRequest("PartitionKey extracted from document doesn't match the one specified in the header");
      }
      if (op.operationType === "Replace" && op.id !== op.resourceBody.id) {
        return badRequest("The id of the document differs from the id of the operation");
      }
      if (op.operationType === "Create") {
        return documentOperations.createOperation(collection, input);
      }
      return op.operationType === "Upsert"
        ? documentOperations.upsertOperation(collection, input)
        : documentOperations.replaceOperation(collection, input);
    case "Read":
      return documentOperations.readOperation(collection, input);
    case "Delete":
      return documentOperations.deleteOperation(collection, input);
    case "Patch": {
      const patch = op.resourceBody || {};
      return patchOperation(collection, { ...input, operations: patch.operations || [], condition: patch.condition });
    }
    default:
      return badRequest(`Operation type '${op.operationType}' is not supported in Batch.`);
  }
}

batchDocuments.default = async (account, req, res, { dbId, collId }) => {
  const ops = await readJSON(req);
  const collection = account.database(dbId).collection(collId);
  if (!collection.read()) {
    return notFound(res);
  }
  if (!Array.isArray(ops) || ops.length === 0 || ops.length > 100) {
    res.statusCode = 400;
    return { code: "BadRequest", message: "A batch holds 1 to 100 operations." };
  }
  const header = req.headers["x-ms-documentdb-partitionkey"];
  const pkHeader = Array.isArray(header) ? header[0] : header;
  let pk;
  try {
    pk = parsePartitionKey(pkHeader, undefined);
  } catch (err) {
    res.statusCode = 400;
    return { code: "BadRequest", message: "The batch needs a partition key header." };
  }
  dropExpired(collection);
  const snap = snapshot(collection.documents);
  const results = [];
  for (let i = 0; i < ops.length; i += 1) {
    let result;
    try {
      result = runOperation(collection, ops[i] || {}, pkHeader, pk);
    } catch (err) {
      result = badRequest(err.message);
    }
    if (result.statusCode >= 400) {
      restore(collection.documents, snap);
      res.statusCode = 207;
      return ops.map((_, j) =>
        j === i
          ? { statusCode: result.statusCode, requestCharge: 1, resourceBody: result.body }
          : { statusCode: 424, requestCharge: 0 }
      );
    }
    const body = result.body;
    results.push({
      statusCode: result.statusCode,
      requestCharge: 1,
      eTag: body && body._etag ? body._etag : undefined,
      resourceBody: body && body._etag ? body : undefined,
    });
  }
  res.statusCode = 200;
  return results;
};

const originalReadMeta = readMeta.default;
readMeta.default = (account, req, res, params) => {
  const meta = originalReadMeta(account, req, res, params);
  const port = req.socket.localPort;
  const location = [{ name: "South Central US", databaseAccountEndpoint: `http://${host}:${port}/` }];
  return {
    ...meta,
    writableLocations: location,
    readableLocations: location,
    userConsistencyPolicy: { defaultConsistencyLevel: req.socket.server.nimbusConsistency },
  };
};

const { createHttpServer } = require(lib);

// headerRefusal returns why the front end refuses req, or undefined: a
// header byte outside printable ASCII (and tab), or a partition key header
// that is not a JSON array of strings, numbers, booleans, null or {}.
function headerRefusal(req) {
  const raw = req.rawHeaders;
  for (let i = 1; i < raw.length; i += 2) {
    // Node reads header bytes as Latin-1: one character per byte.
    if (/[^\t\x20-\x7e]/.test(raw[i])) {
      return { raw: true };
    }
  }
  const header = req.headers["x-ms-documentdb-partitionkey"];
  if (header === undefined) {
    return undefined;
  }
  let values;
  try {
    values = JSON.parse(Array.isArray(header) ? header[0] : header);
  } catch (err) {
    values = undefined;
  }
  const isValue = (v) =>
    v === null ||
    ["string", "number", "boolean"].includes(typeof v) ||
    (typeof v === "object" && !Array.isArray(v) && Object.keys(v).length === 0);
  if (!Array.isArray(values) || !values.every(isValue)) {
    return { message: "The partition key supplied in x-ms-documentdb-partitionkey header is not a JSON array of values." };
  }
  return undefined;
}

// frontEnd puts headerRefusal in front of the server's routes.
function frontEnd(server) {
  const routes = server.listeners("request");
  server.removeAllListeners("request");
  server.on("request", (req, res) => {
    const refusal = headerRefusal(req);
    if (!refusal) {
      routes.forEach((route) => route.call(server, req, res));
      return;
    }
    req.resume();
    if (refusal.raw) {
      res.shouldKeepAlive = false;
      res.writeHead(400, { "content-length": "0", connection: "close" });
      res.end();
      return;
    }
    const body = JSON.stringify({ code: "BadRequest", message: refusal.message });
    res.writeHead(400, {
      "content-type": "application/json",
      "content-length": Buffer.byteLength(body),
      "x-ms-activity-id": randomUUID(),
      "x-ms-request-charge": "0",
    });
    res.end(body);
  });
}

// startServer starts one account, configured by env (the variables above),
// and returns { close }; io receives its port once it listens (listening)
// and a failure to listen (failed).
function startServer(env, io) {
  const server = createHttpServer({ keepAlive: true });
  frontEnd(server);
  server.nimbusConsistency = env.COSMOS_CONSISTENCY || "Session";
  const close = closer(server);
  server.on("error", (err) => io.failed(err));
  server.listen(Number(env.PORT || 0), host, () => io.listening(server.address().port));
  return { close, server };
}

if (process.env.TESTENV_HOST === "1") {
  runHost(startServer);
} else {
  const { server } = startServer(process.env, {
    log: (text) => console.error(text),
    listening: (port) => process.stdout.write(`LISTENING ${port}\n`),
    failed: (err) => {
      console.error("cosmos.js: " + err.message);
      process.exit(1);
    },
  });
  const stop = () => server.close(() => process.exit(0));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}
