// server.js: a node-opcua server as the upstream of scadad's OPC UA client
// connection (uaclient), for integration/opcua_interop_test.go. It offers
// Basic256Sha256 SignAndEncrypt only, with one user name, and revises every
// secure channel's token lifetime down to LIFETIME_MS (node-opcua's floor
// is 2.5 s), so a client renews its token every few seconds. Namespace
// urn:test:upstream has Plant.Level (a Double moving every 100 ms, Good),
// Plant.Stale (UncertainLastUsableValue) and Plant.Broken
// (BadSensorFailure), both moving too.
//
// It prints {"endpoint": ..., "certificate": ...} once listening, then
// every 500 ms {"tokens": [n, ...]}: how many tokens each open secure
// channel has had (the first, then one per renewal). It stops when stdin
// closes.
//
// Environment: PORT, PKI (a folder of its own), USER, PASS, LIFETIME_MS.
"use strict";
const path = require("path");
const {
  OPCUAServer, MessageSecurityMode, SecurityPolicy, Variant, DataType, StatusCodes, OPCUACertificateManager,
} = require("node-opcua");

async function main() {
  const env = process.env;
  const serverCertificateManager = new OPCUACertificateManager({
    rootFolder: path.join(env.PKI, "server"), automaticallyAcceptUnknownCertificate: true,
  });
  const server = new OPCUAServer({
    port: Number(env.PORT),
    hostname: "127.0.0.1",
    alternateHostname: ["127.0.0.1"],
    securityModes: [MessageSecurityMode.SignAndEncrypt],
    securityPolicies: [SecurityPolicy.Basic256Sha256],
    allowAnonymous: false,
    userManager: { isValidUser: (user, pass) => user === env.USER && pass === env.PASS },
    serverCertificateManager,
    defaultSecureTokenLifetime: Number(env.LIFETIME_MS || 3000),
    serverInfo: { applicationUri: "urn:test:nodeopcua-upstream" },
  });
  await server.initialize();
  const addressSpace = server.engine.addressSpace;
  const ns = addressSpace.registerNamespace("urn:test:upstream");
  const plant = ns.addFolder(addressSpace.rootFolder.objects, { browseName: "Plant" });
  const vars = {};
  for (const name of ["Level", "Stale", "Broken"]) {
    vars[name] = ns.addVariable({ componentOf: plant, browseName: name, nodeId: "s=Plant." + name, dataType: "Double", minimumSamplingInterval: 50 });
  }
  const status = { Level: StatusCodes.Good, Stale: StatusCodes.UncertainLastUsableValue, Broken: StatusCodes.BadSensorFailure };
  let tick = 0;
  const move = () => {
    tick++;
    for (const name of Object.keys(vars)) {
      vars[name].setValueFromSource(new Variant({ dataType: DataType.Double, value: tick }), status[name], new Date());
    }
  };
  move();
  const mover = setInterval(move, 100);
  await server.start();
  const endpoint = server.getEndpointUrl();
  console.log(JSON.stringify({ endpoint, certificate: serverCertificateManager.rootDir ? path.join(env.PKI, "server", "own", "certs", "certificate.pem") : "" }));
  const reporter = setInterval(() => {
    const tokens = [];
    for (const ep of server.endpoints) {
      for (const ch of ep.getChannels()) tokens.push(ch.securityTokenCount);
    }
    console.log(JSON.stringify({ tokens }));
  }, 500);
  process.stdin.on("data", () => {});
  process.stdin.on("end", async () => {
    clearInterval(mover);
    clearInterval(reporter);
    await server.shutdown(0);
    process.exit(0);
  });
}

main().catch((err) => {
  console.log(JSON.stringify({ fatal: String(err && err.stack || err) }));
  process.exit(1);
});
