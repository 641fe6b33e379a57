// failover.js: a node-opcua client that follows a redundant pair by
// ServiceLevel, as a redundancy-aware HMI does: a session on each server,
// ServiceLevel and a changing tag subscribed on both, data taken from the
// server with the highest level. It prints "ready" once both deliver; the
// Go test then SIGKILLs the Active and writes "killed" to its stdin. It
// prints one JSON line: how long after "killed" Good data came again from
// the server it then follows, and the lowest ServiceLevel the survivor
// published meanwhile. node-opcua's own reconnection handles the lost
// server (it gives up after a few tries).
//
// Environment: ACTIVE, STANDBY (endpoints), TAG (ns=..;s=.. of a changing
// double), PKI, TIMEOUT_MS.
"use strict";
const readline = require("readline");
const {
  OPCUAClient, MessageSecurityMode, SecurityPolicy, AttributeIds, StatusCodes,
  OPCUACertificateManager, ClientSubscription, TimestampsToReturn,
} = require("node-opcua");

async function follow(name, endpoint, pki, state) {
  const c = OPCUAClient.create({
    applicationName: "scadad-interop-failover", endpointMustExist: false,
    securityMode: MessageSecurityMode.None, securityPolicy: SecurityPolicy.None,
    clientCertificateManager: new OPCUACertificateManager({ rootFolder: pki, automaticallyAcceptUnknownCertificate: true }),
    connectionStrategy: { maxRetry: 3, initialDelay: 100, maxDelay: 300 },
    requestedSessionTimeout: 20000,
  });
  await c.connect(endpoint);
  const s = await c.createSession();
  const sub = ClientSubscription.create(s, { requestedPublishingInterval: 50, requestedMaxKeepAliveCount: 20, requestedLifetimeCount: 200, publishingEnabled: true });
  await new Promise((r) => sub.on("started", r));
  const lvl = await sub.monitor({ nodeId: "i=2267", attributeId: AttributeIds.Value }, { samplingInterval: 0, queueSize: 1 }, TimestampsToReturn.Both);
  lvl.on("changed", (dv) => state.level(name, dv.value.value));
  const tag = await sub.monitor({ nodeId: process.env.TAG, attributeId: AttributeIds.Value }, { samplingInterval: 0, queueSize: 1 }, TimestampsToReturn.Both);
  tag.on("changed", (dv) => state.data(name, dv));
  return { c, s, sub };
}

async function main() {
  const env = process.env;
  const levels = { a: -1, b: -1 };
  const out = { followed: "", goodAfterMs: -1, survivorMinLevel: 256, levelsAfter: [] };
  let killedAt = 0;
  let ready = false;
  let finish;
  const done = new Promise((r) => { finish = r; });
  const best = () => (levels.a >= levels.b ? "a" : "b");
  const gotData = { a: false, b: false };
  const maybeReady = () => {
    if (!ready && gotData.a && levels.a >= 0 && levels.b >= 0) {
      ready = true;
      console.log("ready");
    }
  };
  const state = {
    level(name, v) {
      levels[name] = v;
      maybeReady();
      if (killedAt && name === "b") {
        out.survivorMinLevel = Math.min(out.survivorMinLevel, v);
        out.levelsAfter.push(v);
      }
    },
    data(name, dv) {
      if (dv.statusCode.value !== StatusCodes.Good.value) return;
      gotData[name] = true;
      // A warm Standby has no data before it takes over: ready once the
      // Active delivers and both levels are known.
      maybeReady();
      if (killedAt && name === best() && name === "b" && out.goodAfterMs < 0) {
        out.followed = name;
        out.goodAfterMs = Date.now() - killedAt;
        finish();
      }
    },
  };
  const a = await follow("a", env.ACTIVE, env.PKI + "/a", state);
  const b = await follow("b", env.STANDBY, env.PKI + "/b", state);
  a.c.on("connection_lost", () => { levels.a = 0; });
  const rl = readline.createInterface({ input: process.stdin });
  rl.on("line", (line) => {
    if (line.trim() === "killed") killedAt = Date.now();
  });
  const timeout = Number(env.TIMEOUT_MS || 30000);
  await Promise.race([done, new Promise((r) => setTimeout(r, timeout))]);
  rl.close();
  console.log(JSON.stringify(out));
  setTimeout(() => process.exit(0), 100);
  b.c.disconnect().catch(() => {});
  a.c.disconnect().catch(() => {});
}

main().catch((err) => {
  console.log(JSON.stringify({ fatal: String(err && err.stack || err) }));
  process.exit(1);
});
