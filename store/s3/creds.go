package s3

import (
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// anonymousFor is how long a failed search for credentials is trusted
// before the providers are asked again.
const anonymousFor = time.Minute

// envChain finds credentials the standard AWS ways (see the package
// comment). Unlike a bare credentials.Chain it remembers, for a while, that
// none were found, so anonymous requests do not each probe the instance
// metadata service.
type envChain struct {
	chain credentials.Chain

	mu        sync.Mutex
	anonUntil time.Time
}

func newEnvChain() *envChain {
	providers := []credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{}, // AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials; AWS_PROFILE
	}
	if off, _ := strconv.ParseBool(os.Getenv("AWS_EC2_METADATA_DISABLED")); !off {
		providers = append(providers, &credentials.IAM{}) // EC2, ECS, EKS (web identity)
	}
	return &envChain{chain: credentials.Chain{Providers: providers}}
}

func (e *envChain) note(v credentials.Value) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if v.SignerType == credentials.SignatureAnonymous {
		e.anonUntil = time.Now().Add(anonymousFor)
	} else {
		e.anonUntil = time.Time{}
	}
}

// RetrieveWithCredContext asks the providers in turn.
func (e *envChain) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	v, err := e.chain.RetrieveWithCredContext(cc)
	e.note(v)
	return v, err
}

// Retrieve asks the providers in turn.
func (e *envChain) Retrieve() (credentials.Value, error) {
	v, err := e.chain.Retrieve() //nolint:staticcheck // part of the Provider interface
	e.note(v)
	return v, err
}

// IsExpired reports whether the providers must be asked again.
func (e *envChain) IsExpired() bool {
	e.mu.Lock()
	anon := time.Now().Before(e.anonUntil)
	e.mu.Unlock()
	if anon {
		return false
	}
	return e.chain.IsExpired()
}
