// suite.js: node-opcua against the Active and the Standby of a scadad
// site: discovery and redundancy nodes, a browse path, reads with every
// TimestampsToReturn, a subscription with an absolute deadband, and writes
// (the Active takes one, the Standby refuses, NaN is refused). Driven by
// integration/opcua_interop_test.go; prints one JSON line of findings,
// which the Go test judges.
//
// Environment: ACTIVE, STANDBY (endpoints), NS_URI (the site namespace),
// SITE (its name), TAG (instance.attribute of a changing double), SETPOINT
// (instance.attribute of a writable double), CERT, KEY, PKI, USER, PASS.
"use strict";
const {
  OPCUAClient, MessageSecurityMode, SecurityPolicy, UserTokenType, AttributeIds, StatusCodes,
  OPCUACertificateManager, TimestampsToReturn, DataType, makeBrowsePath, BrowseDirection,
  ClientSubscription, DataChangeFilter, DeadbandType, DataChangeTrigger, ReadRequest,
} = require("node-opcua");

function client(pki) {
  return OPCUAClient.create({
    applicationName: "scadad-interop",
    applicationUri: "urn:test:nodeopcua",
    endpointMustExist: false,
    securityMode: MessageSecurityMode.SignAndEncrypt,
    securityPolicy: SecurityPolicy.Basic256Sha256,
    certificateFile: process.env.CERT,
    privateKeyFile: process.env.KEY,
    clientCertificateManager: new OPCUACertificateManager({ rootFolder: pki, automaticallyAcceptUnknownCertificate: true }),
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
  });
}

async function session(endpoint, pki) {
  const c = client(pki);
  await c.connect(endpoint);
  const s = await c.createSession({ type: UserTokenType.UserName, userName: process.env.USER, password: process.env.PASS });
  return { c, s };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const env = process.env;
  const out = {};
  const a = await session(env.ACTIVE, env.PKI + "/a");
  const b = await session(env.STANDBY, env.PKI + "/b");

  // Discovery and redundancy.
  const eps = await a.c.getEndpoints();
  out.endpoints = eps.map((e) => `${SecurityPolicy[e.securityPolicyUri] || e.securityPolicyUri}|${MessageSecurityMode[e.securityMode]}`);
  const level = async (s) => (await s.read({ nodeId: "i=2267", attributeId: AttributeIds.Value })).value.value;
  out.levels = [await level(a.s), await level(b.s)];
  const arr = await a.s.read({ nodeId: "i=2254", attributeId: AttributeIds.Value });
  out.serverArray = arr.value.value;
  const support = await a.s.read({ nodeId: "i=3709", attributeId: AttributeIds.Value });
  out.redundancySupport = support.value.value;
  const uris = await a.s.read({ nodeId: "i=11314", attributeId: AttributeIds.Value });
  out.serverUriArray = uris.value.value;
  const slType = await a.s.read({ nodeId: "i=2267", attributeId: AttributeIds.DataType });
  out.serviceLevelType = slType.value.value.toString();
  const br = await a.s.browse({ nodeId: "i=2253", browseDirection: BrowseDirection.Forward, resultMask: 63 });
  out.serverChildren = br.references.map((r) => r.browseName.name);
  const ns = await a.s.read({ nodeId: "i=2255", attributeId: AttributeIds.Value });
  out.namespaces = ns.value.value;
  const idx = out.namespaces.indexOf(env.NS_URI);

  // A browse path to the tag.
  const [inst, attr] = env.TAG.split(".");
  const tbp = await a.s.translateBrowsePath(makeBrowsePath("i=85", `/${idx}:${env.SITE}/${idx}:${inst}.${idx}:${attr}`));
  out.browsePath = { status: tbp.statusCode.name, target: tbp.targets && tbp.targets[0] && tbp.targets[0].targetId.toString() };
  const tag = `ns=${idx};s=${env.TAG}`;

  // Reads with every TimestampsToReturn.
  out.timestamps = {};
  for (const which of ["Source", "Server", "Both", "Neither"]) {
    const req = new ReadRequest({ maxAge: 0, timestampsToReturn: TimestampsToReturn[which], nodesToRead: [{ nodeId: tag, attributeId: AttributeIds.Value }] });
    const resp = await new Promise((ok, fail) => a.s.performMessageTransaction(req, (err, r) => (err ? fail(err) : ok(r))));
    const dv = resp.results[0];
    out.timestamps[which] = { status: dv.statusCode.name, source: !!dv.sourceTimestamp, server: !!dv.serverTimestamp };
  }

  // A subscription with an absolute deadband, and one without.
  const sub = ClientSubscription.create(a.s, { requestedPublishingInterval: 100, requestedMaxKeepAliveCount: 10, requestedLifetimeCount: 100, publishingEnabled: true });
  await new Promise((r) => sub.on("started", r));
  const watch = async (filter) => {
    const seen = [];
    const item = await sub.monitor({ nodeId: tag, attributeId: AttributeIds.Value }, { samplingInterval: 100, queueSize: 1, filter }, TimestampsToReturn.Both);
    item.on("changed", (dv) => seen.push(dv.value.value));
    return { item, seen };
  };
  const plain = await watch(null);
  const banded = await watch(new DataChangeFilter({ trigger: DataChangeTrigger.StatusValue, deadbandType: DeadbandType.Absolute, deadbandValue: 1e9 }));
  await sleep(3000);
  out.deadband = { plain: plain.seen.length, banded: banded.seen.length, bandedStatus: banded.item.statusCode ? banded.item.statusCode.name : "Good" };
  await sub.terminate();

  // Writes: the Active forwards, the Standby refuses, NaN is refused.
  const [si, sa] = env.SETPOINT.split(".");
  const sp = `ns=${idx};s=${si}.${sa}`;
  const write = async (s, v) => (await s.write({ nodeId: sp, attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Double, value: v } } })).name;
  out.writes = { active: await write(a.s, 42.5), standby: await write(b.s, 42.5), nan: await write(a.s, NaN), inf: await write(a.s, Infinity) };

  for (const x of [a, b]) {
    await x.s.close();
    await x.c.disconnect();
  }
  console.log(JSON.stringify(out));
}

main().catch((err) => {
  console.log(JSON.stringify({ fatal: String(err && err.stack || err) }));
  process.exit(1);
});
