// Local Cosmos DB stand-in for tests: @vercel/cosmosdb-server over plain HTTP
// on 127.0.0.1. Prints "LISTENING <port>" once ready.
//
// Environment:
//   PORT                port to listen on (0 or unset = a free port)
//   COSMOS_CONSISTENCY  default consistency the account reports (default Session)
//
// Adjustments to the package (patched before its routes load):
//   - reading a missing document in a partitioned container answers 404 with
//     a Cosmos NotFound body (the package answers 500);
//   - GET / (account properties) advertises http://127.0.0.1:PORT/ as the
//     readable and writable location and reports COSMOS_CONSISTENCY.
"use strict";

const lib = "@vercel/cosmosdb-server/lib";
const readDocument = require(`${lib}/handler/read-document`);
const readMeta = require(`${lib}/handler/read-meta`);
const { parsePartitionKey } = require(`${lib}/utils/get-partition-from-header`);

const host = "127.0.0.1";
const consistency = process.env.COSMOS_CONSISTENCY || "Session";
let port = 0;

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
  const header = req.headers["x-ms-documentdb-partitionkey"];
  if (collection.read() && header) {
    let pk;
    try {
      pk = parsePartitionKey(Array.isArray(header) ? header[0] : header, params.docId);
    } catch (err) {
      pk = undefined;
    }
    if (pk !== undefined && !collection.document(params.docId, pk).read()) {
      return notFound(res);
    }
  }
  return originalReadDocument(account, req, res, params);
};

const originalReadMeta = readMeta.default;
readMeta.default = (account, req, res, params) => {
  const meta = originalReadMeta(account, req, res, params);
  const location = [{ name: "South Central US", databaseAccountEndpoint: `http://${host}:${port}/` }];
  return {
    ...meta,
    writableLocations: location,
    readableLocations: location,
    userConsistencyPolicy: { defaultConsistencyLevel: consistency },
  };
};

const { createHttpServer } = require(lib);

const server = createHttpServer({ keepAlive: true });
server.listen(Number(process.env.PORT || 0), host, () => {
  port = server.address().port;
  process.stdout.write(`LISTENING ${port}\n`);
});

const stop = () => server.close(() => process.exit(0));
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
