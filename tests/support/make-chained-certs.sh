#!/usr/bin/env bash
# A cluster CA that signs through an intermediate, as many organisations'
# do: tests/support/make-chained-certs.sh DIR NAME... makes DIR/ca.pem (the
# root alone), and for each NAME: NAME.pem (its certificate, then the
# intermediate's: the chain a peer needs), NAME-alone.pem (its certificate
# only) and NAME.key. Valid for 30 days.
set -euo pipefail
dir=$1
shift
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 30 -subj "/CN=castor root CA" 2>/dev/null
printf 'basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n' > intermediate.ext
openssl req -newkey rsa:2048 -nodes -keyout intermediate.key -out intermediate.csr -subj "/CN=castor intermediate CA" 2>/dev/null
openssl x509 -req -in intermediate.csr -CA ca.pem -CAkey ca.key -CAcreateserial -extfile intermediate.ext \
  -out intermediate.pem -days 30 2>/dev/null
for name in "$@"; do
  openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "/CN=$name" 2>/dev/null
  openssl x509 -req -in "$name.csr" -CA intermediate.pem -CAkey intermediate.key -CAcreateserial \
    -out "$name-alone.pem" -days 30 2>/dev/null
  cat "$name-alone.pem" intermediate.pem > "$name.pem"
  rm -f "$name.csr"
done
rm -f intermediate.csr intermediate.ext
chmod 600 ./*.key
