# Shell helper for the TLS tests and the TLS benchmark: make a throwaway
# PKI with the openssl command line. Sourced after tests/lib/server.sh.
#
#   tls_make_pki DIR
#       writes into DIR: ca.pem (a CA), server.pem and server.key (signed by
#       it, for 127.0.0.1, ::1 and localhost), client.pem and client.key
#       (signed by it), other-ca.pem, and rogue.pem and rogue.key (a client
#       certificate signed by other-ca). EC P-256 keys, valid two days.
#       Returns 1 (with the openssl output on stderr) if any step failed.

: "${OPENSSL_BIN:=openssl}"

_tls_ca() { # _tls_ca DIR NAME CN
    "$OPENSSL_BIN" req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$1/$2.key" -out "$1/$2.pem" -days 2 -subj "/CN=$3" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}

_tls_leaf() { # _tls_leaf DIR NAME CA CN EXTFILE
    "$OPENSSL_BIN" req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$1/$2.key" -out "$1/$2.csr" -subj "/CN=$4" &&
        "$OPENSSL_BIN" x509 -req -in "$1/$2.csr" -CA "$1/$3.pem" -CAkey "$1/$3.key" \
            -CAcreateserial -out "$1/$2.pem" -days 2 -extfile "$5"
}

tls_make_pki() {
    d=$1
    mkdir -p "$d"
    printf 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\nextendedKeyUsage=serverAuth\n' \
        >"$d/server.ext"
    printf 'extendedKeyUsage=clientAuth\n' >"$d/client.ext"
    {
        _tls_ca "$d" ca "dsjob test CA" &&
            _tls_ca "$d" other-ca "another CA" &&
            _tls_leaf "$d" server ca localhost "$d/server.ext" &&
            _tls_leaf "$d" client ca "dsjob test client" "$d/client.ext" &&
            _tls_leaf "$d" rogue other-ca "rogue client" "$d/client.ext"
    } >"$d/pki.log" 2>&1 || { cat "$d/pki.log" >&2; return 1; }
}
