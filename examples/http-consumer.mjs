// A consumer of a pnsq channel with nothing but HTTP (Node.js 18+, no NSQ library):
// node examples/http-consumer.mjs 127.0.0.1:4151 <topic> <channel> [--until-empty]
// Prints each message body on a line; the server keeps the offsets, so a restart goes on
// where the last acknowledged batch ended.
const [address, topic, channel, flag] = process.argv.slice(2);
const base = `http://${address}`;
const untilEmpty = flag === "--until-empty";

async function post(path, params) {
  const reply = await fetch(`${base}${path}?${new URLSearchParams(params)}`, { method: "POST" });
  if (!reply.ok) throw new Error(`${path}: ${reply.status} ${await reply.text()}`);
  return reply;
}

for (;;) {
  const batch = await (await post("/consume", { topic, channel, max: 100, wait_ms: 1000 })).json();
  if (batch.token === null) {
    if (untilEmpty) break;
    continue;
  }
  try {
    for (const message of batch.messages) {
      console.log(Buffer.from(message.body, "base64").toString());
    }
    await post("/consume/ack", { token: batch.token });
  } catch (error) {
    await post("/consume/nack", { token: batch.token, delay_ms: 1000 });
    throw error;
  }
}
