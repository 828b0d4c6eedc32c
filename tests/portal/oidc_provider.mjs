// A real OpenID Connect provider for the portal's sign-in test (tests/portal/test_oidc_provider.py):
// node-oidc-provider (npm `oidc-provider`, OpenID Certified), run on 127.0.0.1 with one client and
// the people of a JSON file, read at every request so that a test changes someone's groups by
// rewriting the file. People sign in on a login page here with a login name and password.
//
// Environment: OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, OIDC_REDIRECT_URI, OIDC_ACCOUNTS_FILE
// ([{sub, login, password, claims: {email, preferred_username, name, groups, ...}}]) and
// OIDC_READY_FILE, where the issuer URL is written once the provider listens (on a port of the
// system's choosing, so that parallel runs never race for one).
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';

import Provider from 'oidc-provider';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const accountsFile = env('OIDC_ACCOUNTS_FILE');
const accounts = () => JSON.parse(readFileSync(accountsFile, 'utf8'));

function loginPage(uid, error) {
  const message = error ? `<p role="alert">${error}</p>` : '';
  return `<!doctype html><html><head><title>Sign in</title></head><body>
<h1>Sign in at the test provider</h1>${message}
<form method="post" action="/interaction/${uid}">
<label>Login <input name="login" autocomplete="username" autofocus></label>
<label>Password <input name="password" type="password" autocomplete="current-password"></label>
<button type="submit">Sign in</button>
</form></body></html>`;
}

async function formBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

// The login prompt only: consent is given by loadExistingGrant (the portal is first-party).
async function interaction(provider, req, res) {
  const { uid, prompt } = await provider.interactionDetails(req, res);
  if (prompt.name !== 'login') throw new Error(`unexpected prompt ${prompt.name}`);
  let error = '';
  if (req.method === 'POST') {
    const form = await formBody(req);
    const person = accounts().find(
      (a) => a.login === form.get('login') && a.password === form.get('password'),
    );
    if (person) {
      await provider.interactionFinished(
        req,
        res,
        { login: { accountId: person.sub } },
        { mergeWithLastSubmission: false },
      );
      return;
    }
    error = 'Invalid login name or password.';
  }
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
  res.end(loginPage(uid, error));
}

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'test-key', use: 'sig', alg: 'RS256' };

let provider;
let handle; // the provider's own routes, set once it exists (before the ready file)
const server = createServer((req, res) => {
  if (req.url.startsWith('/interaction/')) {
    interaction(provider, req, res).catch((err) => {
      console.error(err);
      if (!res.headersSent) res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(`interaction failed: ${err.message}`);
    });
    return;
  }
  handle(req, res);
});

server.listen(0, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  provider = new Provider(issuer, {
    clients: [
      {
        client_id: env('OIDC_CLIENT_ID'),
        client_secret: env('OIDC_CLIENT_SECRET'),
        redirect_uris: [env('OIDC_REDIRECT_URI')],
        grant_types: ['authorization_code'],
        response_types: ['code'],
        // mozilla-django-oidc posts its secret in the body (OIDC_TOKEN_USE_BASIC_AUTH off).
        token_endpoint_auth_method: 'client_secret_post',
      },
    ],
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['preferred_username', 'name'],
      groups: ['groups'],
    },
    async findAccount(ctx, sub) {
      const person = accounts().find((a) => a.sub === sub);
      if (!person) return undefined;
      return { accountId: sub, claims: async () => ({ ...person.claims, sub }) };
    },
    // The portal asks for consent nowhere: every requested scope is granted at sign-in.
    async loadExistingGrant(ctx) {
      const grantId = ctx.oidc.result?.consent?.grantId
        || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
      if (grantId) return ctx.oidc.provider.Grant.find(grantId);
      const grant = new ctx.oidc.provider.Grant({
        clientId: ctx.oidc.client.clientId,
        accountId: ctx.oidc.session.accountId,
      });
      grant.addOIDCScope(ctx.oidc.params.scope);
      await grant.save();
      return grant;
    },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    features: { devInteractions: { enabled: false } },
    // The portal's client sends no PKCE (mozilla-django-oidc's OIDC_USE_PKCE is off).
    pkce: { required: () => false },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    jwks: { keys: [signingKey] },
  });
  handle = provider.callback();
  writeFileSync(env('OIDC_READY_FILE'), issuer);
  console.log(`oidc-provider listening at ${issuer}`);
});
