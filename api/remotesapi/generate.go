// Package remotesapi holds Dolt's remote protocol, the gRPC service
// dolt.services.remotesapi.v1alpha1.ChunkStoreService and its messages,
// generated from chunkstore.proto (chunkd's own description of the wire
// contract; see its header) by protoc with protoc-gen-go and
// protoc-gen-go-grpc. The generated files are checked in, so building needs
// no protoc; after editing chunkstore.proto, run `go generate
// ./api/remotesapi` with protoc (and its well-known types, for
// google/protobuf/timestamp.proto), protoc-gen-go and protoc-gen-go-grpc on
// PATH.
//
// The service itself is package doltremote.
package remotesapi

// The proto file is named from the module root
// (api/remotesapi/chunkstore.proto), the name it is registered under in the
// protobuf registry; its protobuf package is Dolt's, which is what the wire
// sees.
//
//go:generate protoc --proto_path=../.. --go_out=../.. --go_opt=paths=source_relative --go-grpc_out=../.. --go-grpc_opt=paths=source_relative api/remotesapi/chunkstore.proto
