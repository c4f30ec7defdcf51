// Drives a server with Ollama's official JavaScript client (npm "ollama"), for test_fake_ollama.py:
// node check.cjs PACKAGE_DIR URL. Prints one JSON object of what the client got; exits non-zero when
// the client throws. Each step is one the backfill adapter relies on (docs/backfill.md).
'use strict';
const [packageDir, host] = process.argv.slice(2);
const { Ollama } = require(require('path').join(packageDir, 'node_modules', 'ollama'));

async function collect(stream) {
  const parts = [];
  for await (const part of stream) parts.push(part);
  return parts;
}

async function main() {
  const ollama = new Ollama({ host });
  const out = {};
  out.version = (await ollama.version()).version;
  out.tags = (await ollama.list()).models.map((m) => m.name);
  const generated = await ollama.generate({ model: 'tiny', prompt: 'one two', stream: false, options: { num_predict: 3 } });
  out.generate = { response: generated.response, done: generated.done, done_reason: generated.done_reason,
                   prompt_eval_count: generated.prompt_eval_count, eval_count: generated.eval_count };
  const chatted = await ollama.chat({ model: 'tiny', messages: [{ role: 'user', content: 'hello world' }], stream: false,
                                      options: { num_predict: 2 } });
  out.chat = { role: chatted.message.role, content: chatted.message.content, eval_count: chatted.eval_count };
  const genParts = await collect(await ollama.generate({ model: 'tiny', prompt: 'a b', stream: true, options: { num_predict: 4 } }));
  out.generate_stream = { parts: genParts.length, text: genParts.map((p) => p.response).join(''),
                          last: { done: genParts.at(-1).done, eval_count: genParts.at(-1).eval_count } };
  const chatParts = await collect(await ollama.chat({ model: 'tiny', messages: [{ role: 'user', content: 'x y' }], stream: true,
                                                      options: { num_predict: 3 } }));
  out.chat_stream = { parts: chatParts.length, text: chatParts.map((p) => p.message.content).join(''),
                      last: { done: chatParts.at(-1).done, done_reason: chatParts.at(-1).done_reason } };
  out.ps = (await ollama.ps()).models.map((m) => ({ name: m.name, size_vram: m.size_vram }));
  // abort(): the stream ends on the client's side, and the server is to see its connection closed.
  const long = await ollama.generate({ model: 'tiny', prompt: 'endless', stream: true });
  let seen = 0;
  try {
    for await (const part of long) {
      seen += part.response.length > 0 ? 1 : 0;
      if (seen === 2) long.abort();
    }
    out.abort = 'the stream ended without the abort';
  } catch (e) {
    out.abort = e.name;  // AbortError
  }
  // While this client is still running (its exit would close the connection too): the fake saw it.
  out.server_saw_close = false;
  for (let i = 0; i < 200 && !out.server_saw_close; i++) {
    const stats = await (await fetch(`${host}/_fake/stats`)).json();
    out.server_saw_close = stats.cancelled === 1 && stats.active === 0;
    if (!out.server_saw_close) await new Promise((r) => setTimeout(r, 25));
  }
  out.unload = (await ollama.generate({ model: 'tiny', prompt: '', keep_alive: 0 })).done_reason;
  out.ps_after_unload = (await ollama.ps()).models.length;
  try {
    await ollama.generate({ model: 'nope', prompt: 'x', stream: false });
    out.missing = 'no error';
  } catch (e) {
    out.missing = { status: e.status_code, message: e.error };
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
