// Package chunkpb holds the gRPC service ChunkCache and its messages,
// generated from chunk.proto by protoc with protoc-gen-go and
// protoc-gen-go-grpc. The generated files are checked in, so building needs no
// protoc; after editing chunk.proto, run `go generate ./api/chunkpb` with
// protoc, protoc-gen-go and protoc-gen-go-grpc on PATH.
package chunkpb

// The proto file is named from the module root (api/chunkpb/chunk.proto), the
// name it is registered under in the protobuf registry, so it cannot clash
// with another package's chunk.proto.
//
//go:generate protoc --proto_path=../.. --go_out=../.. --go_opt=paths=source_relative --go-grpc_out=../.. --go-grpc_opt=paths=source_relative api/chunkpb/chunk.proto
//go:generate protoc --proto_path=../.. --go_out=../.. --go_opt=paths=source_relative --go-grpc_out=../.. --go-grpc_opt=paths=source_relative api/chunkpb/cluster.proto
