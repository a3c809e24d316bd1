// The baseline: the smallest useful node:http JSON server, for the throughput ratio. Given
// RAW_GET_BODY and RAW_POST_BODY (files), it answers a GET with the first file's bytes and a POST,
// once its body has arrived, with the second's: the same answers as a real server, with no work.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';

const hello = Buffer.from(JSON.stringify({ kind: 'gvc', name: 'bench', hello: 'world' }));
const getBody = process.env.RAW_GET_BODY ? readFileSync(process.env.RAW_GET_BODY) : hello;
const postBody = process.env.RAW_POST_BODY ? readFileSync(process.env.RAW_POST_BODY) : hello;
const server = createServer((req, res) => {
  const answer = () => {
    const body = req.method === 'POST' ? postBody : getBody;
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
    res.end(body);
  };
  if (req.method === 'POST') req.resume().once('end', answer);
  else answer();
});
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`${typeof address === 'object' && address ? address.port : 0}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
