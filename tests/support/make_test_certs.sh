#!/usr/bin/env bash
# make_test_certs.sh DIR: a throw-away CA, a server certificate for 127.0.0.1/localhost and a
# client certificate, made fresh for a Molecule run (nothing here is ever reused elsewhere).
# Writes DIR/{ca.crt,server.crt,server.key,client.crt,client.key}; the CA's key is deleted.
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
# the extensions Python 3.13's strict verification (VERIFY_X509_STRICT) requires of a CA
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 \
  -subj "/CN=kvfleet molecule CA" -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
for who in server client; do
  openssl req -newkey rsa:2048 -nodes -keyout "$who.key" -out "$who.csr" -subj "/CN=kvfleet $who" 2>/dev/null
done
common='basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nauthorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n'
printf "${common}subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n" > server.ext
printf "${common}extendedKeyUsage=clientAuth\n" > client.ext
for who in server client; do
  openssl x509 -req -in "$who.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile "$who.ext" -out "$who.crt" 2>/dev/null
done
rm -f ca.key ./*.csr ./*.ext ./*.srl
chmod 0600 server.key client.key
