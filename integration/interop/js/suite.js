// suite.js: node-opcua against the Active and the Standby of a scadad
// site: discovery and redundancy nodes, the whole Server object, browse
// paths (into a tag's properties too), a browse in pages with continuation
// points, reads with every TimestampsToReturn, a subscription with an
// absolute deadband, and writes (the Active takes one, the Standby
// refuses, NaN is refused). Driven by
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
  ClientSubscription, DataChangeFilter, DeadbandType, DataChangeTrigger, ReadRequest, NodeClass,
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

// walkServer browses everything under the Server object (i=2253) by its
// forward hierarchical references and reads each node, as a strict client
// does: each reference once, named as its target is, every Object and
// Variable with a TypeDefinition, every Variable with a DataType and a
// Good value of it (of that very type where it is a built-in one), no
// Method (Call is not served).
async function walkServer(s) {
  const problems = [];
  const seen = new Set();
  const queue = [{ nodeId: "i=2253", path: "Server" }];
  while (queue.length > 0 && seen.size < 2000) {
    const { nodeId, path } = queue.shift();
    if (seen.has(nodeId)) continue;
    seen.add(nodeId);
    const br = await s.browse({ nodeId, browseDirection: BrowseDirection.Forward, referenceTypeId: "HierarchicalReferences", includeSubtypes: true, nodeClassMask: 0, resultMask: 63 });
    if (br.statusCode.name !== "Good") {
      problems.push(`${path}: browse ${br.statusCode.name}`);
      continue;
    }
    const listed = new Set();
    for (const ref of br.references) {
      const id = ref.nodeId.toString();
      const where = `${path}/${ref.browseName.name}`;
      const key = `${ref.referenceTypeId.toString()} ${id}`;
      if (listed.has(key)) problems.push(`${where}: listed twice`);
      listed.add(key);
      // Of the other namespaces, only their metadata under Namespaces is
      // the Server object's (HasNotifier leads to the site's instances).
      if (ref.nodeId.namespace !== 0 && !where.startsWith("Server/Namespaces/")) continue;
      if (ref.nodeClass === NodeClass.Method) {
        problems.push(`${where}: a Method`);
        continue;
      }
      const [bn, dt, val] = await s.read([
        { nodeId: id, attributeId: AttributeIds.BrowseName },
        { nodeId: id, attributeId: AttributeIds.DataType },
        { nodeId: id, attributeId: AttributeIds.Value },
      ]);
      if (!bn.value.value || bn.value.value.name !== ref.browseName.name) problems.push(`${where}: BrowseName ${bn.value.value}`);
      if ((ref.nodeClass === NodeClass.Object || ref.nodeClass === NodeClass.Variable) && (!ref.typeDefinition || ref.typeDefinition.value === 0)) {
        problems.push(`${where}: no TypeDefinition`);
      }
      if (ref.nodeClass === NodeClass.Variable) {
        const type = dt.value.value;
        if (dt.statusCode.name !== "Good" || !type || type.value === 0) problems.push(`${where}: DataType ${dt.statusCode.name}`);
        if (val.statusCode.name !== "Good" || val.value.dataType === DataType.Null) {
          problems.push(`${where}: value ${val.statusCode.name}`);
        } else if (type && type.namespace === 0 && type.value <= 25 && type.value !== DataType.Variant && val.value.dataType !== type.value) {
          problems.push(`${where}: a ${DataType[val.value.dataType]} value, DataType ${DataType[type.value]}`);
        }
      }
      queue.push({ nodeId: id, path: where });
    }
  }
  return { nodes: seen.size, problems: problems.slice(0, 40), problemCount: problems.length };
}

// pagedBrowse browses nodeId two references at a time, following the
// continuation points with BrowseNext; then it takes one more point and
// releases it, and uses it again.
async function pagedBrowse(s, nodeId) {
  const desc = { nodeId, browseDirection: BrowseDirection.Both, referenceTypeId: null, includeSubtypes: true, nodeClassMask: 0, resultMask: 63 };
  const whole = await s.browse(desc);
  const saved = s.requestedMaxReferencesPerNode;
  s.requestedMaxReferencesPerNode = 2;
  try {
    let r = await s.browse(desc);
    const ids = [];
    let pages = 0;
    let largest = 0;
    for (;;) {
      pages++;
      largest = Math.max(largest, r.references.length);
      for (const ref of r.references) ids.push(ref.nodeId.toString());
      if (!r.continuationPoint || r.continuationPoint.length === 0 || pages > 100) break;
      r = await s.browseNext(r.continuationPoint, false);
    }
    const one = await s.browse(desc);
    const released = await s.browseNext(one.continuationPoint, true);
    const again = await s.browseNext(one.continuationPoint, false);
    return {
      whole: whole.references.length, paged: ids.length, pages, largest,
      same: JSON.stringify(ids) === JSON.stringify(whole.references.map((x) => x.nodeId.toString())),
      released: released.statusCode.name, reused: again.statusCode.name,
    };
  } finally {
    s.requestedMaxReferencesPerNode = saved;
  }
}

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
  // ServerRedundancy: its type, and the properties browsable under it.
  const red = await a.s.browse({ nodeId: "i=2296", browseDirection: BrowseDirection.Forward, referenceTypeId: null, includeSubtypes: true, nodeClassMask: 0, resultMask: 63 });
  out.redundancyType = red.references.filter((r) => r.referenceTypeId.toString() === "ns=0;i=40").map((r) => r.nodeId.toString());
  out.redundancyChildren = red.references.filter((r) => r.referenceTypeId.toString() === "ns=0;i=46").map((r) => r.browseName.name);
  const ns = await a.s.read({ nodeId: "i=2255", attributeId: AttributeIds.Value });
  out.namespaces = ns.value.value;
  const idx = out.namespaces.indexOf(env.NS_URI);

  // A browse path to the tag.
  const [inst, attr] = env.TAG.split(".");
  const tbp = await a.s.translateBrowsePath(makeBrowsePath("i=85", `/${idx}:${env.SITE}/${idx}:${inst}.${idx}:${attr}`));
  out.browsePath = { status: tbp.statusCode.name, target: tbp.targets && tbp.targets[0] && tbp.targets[0].targetId.toString() };
  const tag = `ns=${idx};s=${env.TAG}`;
  // Into the tag's properties: its EURange and EngineeringUnits.
  out.propertyPaths = {};
  for (const prop of ["EURange", "EngineeringUnits"]) {
    const r = await a.s.translateBrowsePath(makeBrowsePath("i=85", `/${idx}:${env.SITE}/${idx}:${inst}.${idx}:${attr}.${prop}`));
    out.propertyPaths[prop] = { status: r.statusCode.name, target: r.targets && r.targets[0] && r.targets[0].targetId.toString() };
  }
  const range = await a.s.read({ nodeId: `${tag}/EURange`, attributeId: AttributeIds.Value });
  out.euRange = range.value.value ? { low: range.value.value.low, high: range.value.value.high } : null;

  // The Server object, walked and read whole; a browse in pages.
  out.serverObject = await walkServer(a.s);
  out.paged = await pagedBrowse(a.s, "i=2253");

  // The metadata of each namespace under Server.Namespaces (i=11715):
  // its BrowseName and its NamespaceUri property's value.
  out.namespaceMetadata = {};
  const metas = await a.s.browse({ nodeId: "i=11715", browseDirection: BrowseDirection.Forward, referenceTypeId: "HasComponent", includeSubtypes: false, nodeClassMask: 0, resultMask: 63 });
  for (const m of metas.references) {
    const uri = await a.s.translateBrowsePath(makeBrowsePath(m.nodeId, "/NamespaceUri"));
    const target = uri.targets && uri.targets[0] && uri.targets[0].targetId;
    const v = target ? await a.s.read({ nodeId: target, attributeId: AttributeIds.Value }) : null;
    out.namespaceMetadata[m.browseName.name] = { type: m.typeDefinition.toString(), uri: v && v.value.value };
  }

  // A Browse asking for BrowseNames only (ResultMask 8): the other fields
  // null (Part 4, 7.5).
  const masked = await a.s.browse({ nodeId: "i=2253", browseDirection: BrowseDirection.Forward, referenceTypeId: "HierarchicalReferences", includeSubtypes: true, nodeClassMask: 0, resultMask: 8 });
  out.masked = masked.references.map((r) => ({ name: r.browseName.name, refType: r.referenceTypeId.toString(), nodeClass: r.nodeClass, typeDef: r.typeDefinition.toString(), forward: r.isForward }));

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
