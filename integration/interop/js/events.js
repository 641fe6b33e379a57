// events.js: node-opcua as an alarm client of scadad: it subscribes to
// the events of the Server object (i=2253) with an event filter
// (constructEventFilter, the ConditionId included), calls ConditionRefresh
// and collects the retained conditions between RefreshStartEvent and
// RefreshEndEvent, then acknowledges one alarm with the EventId and
// ConditionId its event carried (its session's acknowledgeCondition) and
// waits for the event that shows it acknowledged. Driven by integration/opcua_alarms_interop_test.go;
// prints one JSON line of findings, which the Go test judges.
//
// Environment: ENDPOINT (the Active's), PKI, ACK (the alarm id to
// acknowledge), TIMEOUT_MS.
"use strict";
const {
  OPCUAClient, MessageSecurityMode, SecurityPolicy, OPCUACertificateManager, ClientSubscription,
  TimestampsToReturn, AttributeIds, constructEventFilter, DataType,
} = require("node-opcua");

const fields = ["EventId", "EventType", "SourceName", "Message", "Severity", "ConditionName", "ActiveState.Id", "AckedState.Id", "ConditionId"];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(timeoutMs, what, cond) {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

async function main() {
  const env = process.env;
  const timeout = Number(env.TIMEOUT_MS || 20000);
  const out = {};
  const c = OPCUAClient.create({
    applicationName: "scadad-interop-events", endpointMustExist: false,
    securityMode: MessageSecurityMode.None, securityPolicy: SecurityPolicy.None,
    clientCertificateManager: new OPCUACertificateManager({ rootFolder: env.PKI, automaticallyAcceptUnknownCertificate: true }),
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
  });
  await c.connect(env.ENDPOINT);
  const s = await c.createSession();
  try {
    const sub = ClientSubscription.create(s, { requestedPublishingInterval: 50, requestedMaxKeepAliveCount: 20, requestedLifetimeCount: 200, publishingEnabled: true });
    await new Promise((r) => sub.on("started", r));
    const events = [];
    const item = await sub.monitor({ nodeId: "i=2253", attributeId: AttributeIds.EventNotifier },
      { samplingInterval: 0, queueSize: 1000, filter: constructEventFilter(fields) }, TimestampsToReturn.Both);
    item.on("changed", (values) => {
      const e = {};
      fields.forEach((f, i) => { e[f] = values[i] ? values[i].value : null; });
      events.push(e);
    });
    const typeOf = (e) => (e.EventType ? e.EventType.toString() : "");

    const refresh = await s.call({ objectId: "i=2782", methodId: "i=3875", inputArguments: [{ dataType: DataType.UInt32, value: sub.subscriptionId }] });
    out.refreshStatus = refresh.statusCode.name;
    await until(timeout, "RefreshEndEvent", () => events.some((e) => typeOf(e) === "ns=0;i=2788"));
    const start = events.findIndex((e) => typeOf(e) === "ns=0;i=2787");
    const end = events.findIndex((e) => typeOf(e) === "ns=0;i=2788");
    out.refreshed = events.slice(start + 1, end).map((e) => `${e.ConditionName}:${e.Message && e.Message.text}:${e["ActiveState.Id"]}`).sort();

    const mine = events.slice(start + 1, end).find((e) => e.EventId && e.EventId.toString("latin1").startsWith(env.ACK + "\u0000"));
    if (!mine) throw new Error(`no refreshed event of ${env.ACK}`);
    out.conditionId = mine.ConditionId ? mine.ConditionId.toString() : "";
    const ack = await s.acknowledgeCondition(mine.ConditionId, mine.EventId, "from node-opcua");
    out.ackStatus = ack.name;
    await until(timeout, "the acknowledged event", () => events.some((e) => e.EventId && e.EventId.toString("latin1").startsWith(env.ACK + "\u0000") && e["AckedState.Id"] === true));
    out.ackedEvent = true;
    await sub.terminate();
  } catch (err) {
    out.fatal = String(err && err.message ? err.message : err);
  }
  await s.close();
  await c.disconnect();
  console.log(JSON.stringify(out));
}

main().catch((err) => {
  console.log(JSON.stringify({ fatal: String(err && err.message ? err.message : err) }));
  process.exit(0);
});
