// renew.js: a node-opcua client that holds one session while its secure
// channel renews its token again and again, reading the server's
// CurrentTime (i=2258) meanwhile. Driven by integration/opcua_interop_test.go;
// prints one JSON line with what it saw.
//
// Environment: ENDPOINT, POLICY (None | Basic256Sha256), MODE (None |
// SignAndEncrypt | Sign), LIFETIME_MS, DURATION_MS, PKI (a folder of its
// own), CERT and KEY (PEM, for a secure channel), USER and PASS (else
// anonymous).
"use strict";
const {
  OPCUAClient, MessageSecurityMode, SecurityPolicy, UserTokenType, AttributeIds, StatusCodes,
  OPCUACertificateManager,
} = require("node-opcua");

async function main() {
  const env = process.env;
  const lifetime = Number(env.LIFETIME_MS || 2000);
  const duration = Number(env.DURATION_MS || 9000);
  const certificateManager = new OPCUACertificateManager({
    rootFolder: env.PKI, automaticallyAcceptUnknownCertificate: true,
  });
  const client = OPCUAClient.create({
    applicationName: "scadad-interop",
    applicationUri: env.APP_URI || "urn:test:nodeopcua",
    endpointMustExist: false,
    securityMode: MessageSecurityMode[env.MODE || "None"],
    securityPolicy: SecurityPolicy[env.POLICY || "None"],
    certificateFile: env.CERT || undefined,
    privateKeyFile: env.KEY || undefined,
    clientCertificateManager: certificateManager,
    defaultSecureTokenLifetime: lifetime,
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
    requestedSessionTimeout: 60000,
  });
  const out = { reads: 0, failures: [], tokens: [], renewals: 0, closed: false };
  client.on("security_token_renewed", (channel, token) => {
    out.renewals++;
    out.tokens.push(token.tokenId);
  });
  let finishing = false;
  client.on("close", () => { if (!finishing) out.closed = true; });
  await client.connect(env.ENDPOINT);
  const first = client._secureChannel && client._secureChannel.activeSecurityToken;
  if (first) out.tokens.unshift(first.tokenId);
  const identity = env.USER
    ? { type: UserTokenType.UserName, userName: env.USER, password: env.PASS }
    : { type: UserTokenType.Anonymous };
  const session = await client.createSession(identity);
  const until = Date.now() + duration;
  while (Date.now() < until) {
    try {
      const dv = await session.read({ nodeId: "i=2258", attributeId: AttributeIds.Value });
      if (dv.statusCode.value !== StatusCodes.Good.value) {
        out.failures.push(`read: ${dv.statusCode.name}`);
      } else {
        out.reads++;
      }
    } catch (err) {
      out.failures.push(`read: ${err.message}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  finishing = true;
  await session.close();
  await client.disconnect();
  console.log(JSON.stringify(out));
}

main().catch((err) => {
  console.log(JSON.stringify({ fatal: String(err && err.stack || err) }));
  process.exit(1);
});
