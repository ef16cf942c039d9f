// The rig's OpenID provider: oidc-provider (the certified Node.js implementation) on loopback,
// issuing RS256 JWT access tokens by the client-credentials grant, with its keys at /jwks.
// Started by proxy/tools/rig/oidc.py, configured from the environment:
//   OIDC_HOST         the loopback address to bind (default 127.0.0.1)
//   OIDC_PORT         its port (the issuer is http://<host>:<port>)
//   OIDC_CONFIG_FILE  JSON: {"jwks": {"keys": [private JWKs]}, "clients": [{"client_id",
//                     "client_secret", "ttl"?}], "audience": "urn:kafka", "ttl": seconds}
//                     (a client's own "ttl" overrides the default lifetime of its tokens)
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const host = process.env.OIDC_HOST || '127.0.0.1';
const port = Number(process.env.OIDC_PORT);
const config = JSON.parse(readFileSync(process.env.OIDC_CONFIG_FILE, 'utf8'));
const issuer = `http://${host}:${port}`;
const audience = config.audience;
const ttl = config.ttl;
// A client's own token lifetime (seconds), else the default: the expiry tests use a client
// whose tokens live a few seconds.
const ttlOf = (client) => config.clients.find((c) => c.client_id === client?.clientId)?.ttl ?? ttl;

const provider = new Provider(issuer, {
  clients: config.clients.map((c) => ({
    client_id: c.client_id,
    client_secret: c.client_secret,
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    scope: 'kafka',
  })),
  jwks: config.jwks,
  scopes: ['kafka'],
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => audience,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource, client) => ({
        scope: 'kafka',
        audience,
        accessTokenFormat: 'jwt',
        accessTokenTTL: ttlOf(client),
        jwt: { sign: { alg: 'RS256' } },
      }),
    },
  },
  ttl: { ClientCredentials: (ctx, token, client) => ttlOf(client) },
});

provider.listen(port, host, () => {
  console.log(`oidc-provider ${issuer} ready`);
});
